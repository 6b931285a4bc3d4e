"""How concurrent migrations exclude each other for their whole run, by the means each
database offers (:attr:`caravel_lite.dialect.Dialect.schema_lock`): a PostgreSQL
session advisory lock, a MariaDB/MySQL named lock, or (SQLite) one write transaction."""
from __future__ import annotations

import contextlib
import hashlib
import sys
import time
from typing import TYPE_CHECKING, Callable, Iterator

import peewee

from caravel_lite.errors import DatabaseBusy, SchemaLockTimeout

if TYPE_CHECKING:
    from caravel_lite.dialect import Dialect

__all__ = ["migration_lock", "MIGRATION_KEY"]

# The PostgreSQL advisory lock key of caravel_lite's migrations (advisory locks are
# scoped to the current database): the first 8 bytes of sha256("caravel_lite.migrate").
MIGRATION_KEY = int.from_bytes(hashlib.sha256(b"caravel_lite.migrate").digest()[:8],
                               "big", signed=True)


@contextlib.contextmanager
def migration_lock(dialect: "Dialect", db: peewee.Database,
                   timeout: float) -> Iterator[None]:
    """Hold the database's migration lock for the duration of the block, waiting up to
    ``timeout`` seconds for another holder (then :class:`SchemaLockTimeout`). On SQLite
    the block runs inside one write transaction."""
    deadline = time.monotonic() + timeout
    if dialect.schema_lock == "advisory":
        # A polled try-lock: a lock_timeout set on the session cannot cut the wait
        # short, and the wait stays bounded by ``timeout``.
        _wait_for_lock(lambda: bool(db.execute_sql(
            "SELECT pg_try_advisory_lock(%s)" % MIGRATION_KEY).fetchone()[0]),
            deadline, timeout)
        try:
            yield
        finally:
            db.execute_sql("SELECT pg_advisory_unlock(%s)" % MIGRATION_KEY)
    elif dialect.schema_lock == "named":
        # GET_LOCK names are server-wide: one lock per database.
        database = db.execute_sql("SELECT DATABASE()").fetchone()[0] or ""
        name = "caravel_lite.migrate." + hashlib.sha256(
            database.encode("utf-8")).hexdigest()[:32]
        _wait_for_lock(lambda: db.execute_sql(
            "SELECT GET_LOCK(%s, 1)", (name,)).fetchone()[0] == 1, deadline, timeout)
        try:
            yield
        finally:
            db.execute_sql("SELECT RELEASE_LOCK(%s)", (name,))
    else:
        transaction = db.atomic("IMMEDIATE")

        def begin() -> bool:
            try:
                transaction.__enter__()
            except peewee.OperationalError as exc:
                if dialect.is_transient(exc) or isinstance(exc, DatabaseBusy):
                    return False
                raise
            return True

        _wait_for_lock(begin, deadline, timeout)
        try:
            yield
        except BaseException:
            transaction.__exit__(*sys.exc_info())
            raise
        transaction.__exit__(None, None, None)


def _wait_for_lock(acquire: Callable[[], bool], deadline: float, timeout: float) -> None:
    pause = 0.05
    while not acquire():
        if time.monotonic() >= deadline:
            raise SchemaLockTimeout(
                f"another process held caravel_lite's migration lock for more than "
                f"{timeout:g} s; it is still migrating, or it stopped while holding it")
        time.sleep(pause)
        pause = min(pause * 2, 1.0)
