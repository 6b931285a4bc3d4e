"""The pytest plugin: fixtures for testing an application's jobs.

pytest loads it by itself wherever caravel_lite is installed (entry point ``pytest11``);
elsewhere add ``-p caravel_lite.testing.plugin``. Every fixture is function-scoped and
prefixed ``caravel_`` so that it cannot shadow the application's own.

- ``caravel_db_url``: the URL of a migrated SQLite database in the test's ``tmp_path``
  (for code under test that opens its own connection, such as a worker subprocess);
- ``caravel_db``: that database, open and connected (closed after the test);
- ``caravel_clock``: a :class:`~caravel_lite.testing.ManualClock`;
- ``caravel_queue_factory``: ``make(registry, options=None, *, inline=False,
  scope=None, db=None)`` builds a queue over ``caravel_db`` (or ``db``) and
  ``caravel_clock``; ``inline=True`` gives an :class:`~caravel_lite.testing.InlineQueue`.

The factory's queues keep time by ``caravel_clock``, which stands at 2030-01-01 UTC
until moved: a ``not_before`` computed from the real time is long past for them (the job
runs at once under ``drain``). Compute due times from the queue's clock,
``queue.clock() + timedelta(days=1)``, in the application as in the test.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator, Optional, Protocol

import peewee
import pytest

from caravel_lite.dialect import open_database
from caravel_lite.errors import InvalidField
from caravel_lite.migrator import migrate
from caravel_lite.options import QueueOptions
from caravel_lite.queue import DatabaseQueue
from caravel_lite.registry import JobRegistry
from caravel_lite.testing.clock import ManualClock
from caravel_lite.testing.drain import Scope
from caravel_lite.testing.inline import InlineQueue



class QueueFactory(Protocol):
    """The type of the ``caravel_queue_factory`` fixture (for annotating tests)."""

    def __call__(self, registry: JobRegistry, options: Optional[QueueOptions] = None, *,
                 inline: bool = False, scope: Optional[Scope] = None,
                 db: Optional[peewee.Database] = None) -> DatabaseQueue: ...


@pytest.fixture
def caravel_db_url(tmp_path: Path) -> str:
    """A migrated, empty SQLite database of this test (removed with its tmp_path)."""
    url = f"sqlite:///{tmp_path / 'caravel.sqlite'}"
    db = open_database(url)
    with db.connection_context():
        migrate(db)
    return url


@pytest.fixture
def caravel_db(caravel_db_url: str) -> Iterator[peewee.Database]:
    """The ``caravel_db_url`` database, connected for the test and closed after it."""
    db = open_database(caravel_db_url)
    db.connect()
    try:
        yield db
    finally:
        if db.in_transaction():
            db.rollback()
        db.close()


@pytest.fixture
def caravel_clock() -> ManualClock:
    """A clock standing at 2030-01-01 UTC until the test (or drain) moves it: ahead of
    the real time, so due times must come from it (``queue.clock()``), not from
    ``datetime.now()``."""
    return ManualClock()


@pytest.fixture
def caravel_queue_factory(caravel_db: peewee.Database,
                          caravel_clock: ManualClock) -> QueueFactory:
    """Builds queues over ``caravel_db`` and ``caravel_clock``."""
    def make(registry: JobRegistry, options: Optional[QueueOptions] = None, *,
             inline: bool = False, scope: Optional[Scope] = None,
             db: Optional[peewee.Database] = None) -> DatabaseQueue:
        database = db if db is not None else caravel_db
        if inline:
            return InlineQueue(database, registry, options, clock=caravel_clock,
                               scope=scope)
        if scope is not None:
            raise InvalidField("scope", "is for inline queues; pass it to drain() otherwise")
        return DatabaseQueue(database, registry, options, clock=caravel_clock)
    return make
