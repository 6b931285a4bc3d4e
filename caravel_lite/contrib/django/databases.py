"""Where the backend's jobs live: a Peewee database of its own (the worker's, the
dashboard's, ``get_result``'s), opened from Django's ``DATABASES`` entry or from a URL,
and a Peewee database that writes through Django's own connection of the calling
thread, which is how ``enqueue()`` joins the caller's ``transaction.atomic()``.

The shared one never opens, commits or closes a connection: Django owns it. It is used
only inside an atomic block, where caravel_lite's enqueue guards its INSERT with a
savepoint and commits nothing (the same path as an enqueue inside a Peewee
transaction), so the job is committed or rolled back with the caller's work."""
from __future__ import annotations

from typing import Any, Dict, Type
from urllib.parse import quote

import peewee
from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from caravel_lite.dialect import open_database

__all__ = ["url_of", "open_own", "sharing", "SharedConnection"]

# Django's ENGINE -> caravel_lite's URL scheme and the Peewee class whose SQL and
# error mapping fit the driver Django connects with.
_ENGINES: Dict[str, "tuple[str, Type[peewee.Database]]"] = {
    "sqlite": ("sqlite", peewee.SqliteDatabase),
    "postgresql": ("postgresql", peewee.PostgresqlDatabase),
    "mysql": ("mysql", peewee.MySQLDatabase),
}


def _vendor(alias: str) -> str:
    vendor = str(connections[alias].vendor)
    if vendor not in _ENGINES:
        raise ImproperlyConfigured(f"DATABASES[{alias!r}] is {vendor}: caravel_lite runs on "
                                   f"SQLite, PostgreSQL and MariaDB/MySQL")
    return vendor


def url_of(alias: str) -> str:
    """A caravel_lite URL for Django's database ``alias``, read when called: under the
    test runner it names the test database Django created."""
    settings = connections[alias].settings_dict
    vendor = _vendor(alias)
    name = str(settings.get("NAME") or "")
    if vendor == "sqlite":
        if not name or name == ":memory:" or "mode=memory" in name:
            # Django's test database for SQLite is in memory unless TEST NAME is a file,
            # and a worker's other connections (its lease renewal) would not see it.
            raise ImproperlyConfigured(
                f"DATABASES[{alias!r}] is an in-memory SQLite database, which caravel_lite's "
                f"connections cannot share: name a file (for tests: "
                f"DATABASES[{alias!r}]['TEST'] = {{'NAME': 'test.sqlite3'}})")
        return f"sqlite:///{name}"
    user = quote(str(settings.get("USER") or ""), safe="")
    password = settings.get("PASSWORD") or ""
    login = user + (":" + quote(str(password), safe="") if password else "")
    host = str(settings.get("HOST") or "localhost")
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    return f"{_ENGINES[vendor][0]}://{login}{'@' if login else ''}{host}{port}/{quote(name)}"


def open_own(alias: str) -> peewee.Database:
    """A Peewee database of caravel_lite's own on Django's database ``alias`` (its own
    connections, with caravel_lite's session settings)."""
    return open_database(url_of(alias))


class SharedConnection:
    """Mixed into the Peewee class of Django's engine: every statement runs on Django's
    connection ``alias`` of the calling thread. Transactions are Django's: it is in a
    transaction exactly when Django is in an atomic block."""

    django_alias: str

    def _django(self) -> Any:
        connection = connections[self.django_alias]
        connection.ensure_connection()
        return connection

    def is_closed(self) -> bool:
        return False

    def connection(self) -> Any:
        return self._django().connection

    def cursor(self, named_cursor: Any = None) -> Any:
        # The driver's own cursor, not Django's wrapper: caravel_lite's statements use
        # the driver's placeholders, as they do on caravel_lite's own connections.
        return self._django().connection.cursor()

    def in_transaction(self) -> bool:
        return bool(connections[self.django_alias].in_atomic_block)

    def connect(self, reuse_if_open: bool = False) -> bool:
        return False

    def close(self) -> bool:  # Django closes its connections itself
        return False


def sharing(alias: str) -> peewee.Database:
    """A Peewee database that runs every statement on Django's connection ``alias`` of
    the calling thread (see :class:`SharedConnection`); use it only inside an atomic
    block of that alias."""
    base = _ENGINES[_vendor(alias)][1]
    cls = type(f"Django{base.__name__}", (SharedConnection, base), {"django_alias": alias})
    db: peewee.Database = cls(None)
    # Peewee reads the server version on connect, which this database never does; the
    # MariaDB/MySQL dialect needs it (collation, SKIP LOCKED).
    if isinstance(db, peewee.MySQLDatabase):
        db._set_server_version(db.connection())  # type: ignore[attr-defined]
    db.deferred = False
    return db
