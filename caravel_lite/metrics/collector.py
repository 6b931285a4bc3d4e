"""The collector: one scrape is one reading of the queue database, turned into the
families of :data:`~caravel_lite.metrics.families.DEFAULT_FAMILIES` and rendered as
OpenMetrics text."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, List, Optional, Sequence

import peewee
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST, generate_latest

from caravel_lite.clock import Clock, floor_ms, now_micros
from caravel_lite.errors import InvalidField
from caravel_lite.metrics.families import DEFAULT_FAMILIES, Family
from caravel_lite.metrics.reading import Readers, Reading

CONTENT_TYPE = CONTENT_TYPE_LATEST


@contextlib.contextmanager
def connection_for_scrape(db: peewee.Database) -> Iterator[None]:
    """A connection for one scrape, closed after it, unless the caller (a dashboard
    request, an application's own) already holds one in this thread: a scrape every
    15 s holds none between scrapes."""
    if not db.is_closed():
        yield
        return
    db.connect()
    try:
        yield
    finally:
        db.close()


class QueueMetrics:
    """A ``prometheus_client`` collector of the queue database's figures (register it
    in a ``CollectorRegistry``, or call :meth:`render`).

    ``admin_or_db``: a :class:`caravel_lite.QueueAdmin` or a Peewee database (every
    tenant's jobs are counted; no tenant is named unless ``tenant_label=True`` splits
    ``caravel_jobs`` by tenant, one series per tenant and state: mind the
    cardinality). ``families``: the family functions to render, in order (see
    :mod:`caravel_lite.metrics.families`). Each scrape reads the database once per
    family part, on a connection it opens and closes unless one is held already.
    """

    def __init__(self, admin_or_db: Any, *, tenant_label: bool = False,
                 families: Sequence[Family] = DEFAULT_FAMILIES,
                 clock: Optional[Clock] = None) -> None:
        from caravel_lite.admin import QueueAdmin

        if isinstance(admin_or_db, peewee.Database):
            admin_or_db = QueueAdmin(admin_or_db, clock=clock)
        if not isinstance(admin_or_db, QueueAdmin):
            raise InvalidField("admin_or_db", "must be a caravel_lite.QueueAdmin or a "
                               "Peewee database")
        if tenant_label is not True and tenant_label is not False:
            raise InvalidField("tenant_label", "must be True or False")
        self.admin = admin_or_db
        self.tenant_label = tenant_label
        self.families = tuple(families)
        self.clock = clock if clock is not None else admin_or_db.clock
        self._readers = Readers(admin_or_db.db)

    def describe(self) -> List[Any]:
        # Nothing described: registering the collector must not read the database.
        return []

    def collect(self) -> Iterator[Any]:
        """The families of one reading (read whole before any is yielded, so the
        connection is closed before the text is written)."""
        with connection_for_scrape(self.admin.db):
            reading = Reading(self._readers, self.admin, floor_ms(now_micros(self.clock)),
                              self.tenant_label)
            found = [metric for family in self.families for metric in family(reading)]
        return iter(found)

    def render(self) -> bytes:
        """One scrape as OpenMetrics text (:data:`CONTENT_TYPE`)."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return bytes(generate_latest(registry))
