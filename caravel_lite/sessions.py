"""What the databases :func:`caravel_lite.dialect.open_database` returns do besides
Peewee's own: SQLite statements repeated within the call's retry budget
(:class:`BusyRetry`), one shared in-memory SQLite database per object
(:class:`SharedMemory`), and dropped server connections replaced on the next statement
(:class:`Reconnect`). Each asks the dialect how to read an error; none knows which
database it runs on (caravel_lite.dialect imports this module and re-exports its
names)."""
from __future__ import annotations

import secrets
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, TypeVar, cast

import peewee

from caravel_lite.errors import DatabaseBusy
from caravel_lite.observability import logger
from caravel_lite.retry import CallBudget, RetryPolicy, TransientCounter, call_budget

__all__ = ["BusyRetry", "SharedMemory", "Reconnect", "reconnects", "private_memory",
           "busy_retry_class", "reconnect_class", "MEMORY_NAMES"]

T = TypeVar("T")

if TYPE_CHECKING:  # the mixins are only ever combined with a Peewee database class
    _Database = peewee.Database
    _SqliteDatabase = peewee.SqliteDatabase
else:
    _Database = _SqliteDatabase = object


class Reconnect(_Database):
    """Mixed into the PostgreSQL and MariaDB/MySQL classes :func:`open_database`
    returns (the idea of ``playhouse.shortcuts.ReconnectMixin``, with the dialect's
    own classification of a lost connection, :meth:`Dialect.is_disconnect`).

    A statement (or BEGIN) that finds the connection dropped while no transaction is
    open closes it, connects again and runs once more on the new connection, so an
    application that enqueues after a database restart or a killed connection works
    without rebuilding its Database object. Inside a transaction the error reaches
    the caller: the transaction's work is lost and only the caller can repeat it.
    Each reconnect is counted in :data:`reconnects` and logged as a warning.
    """

    # Read by caravel_lite.retry: the library's own short transactions may be repeated
    # after a dropped connection, since the next BEGIN reconnects.
    replaces_dropped_connections = True

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        run = super(Reconnect, self).execute_sql
        return self._reconnecting(lambda: run(sql, params))  # type: ignore[no-untyped-call]

    def begin(self, *args: Any, **kwargs: Any) -> None:
        # BEGIN runs before Peewee records the transaction: nothing is lost here yet.
        self._reconnecting(lambda: super(Reconnect, self).begin(*args, **kwargs))

    def _reconnecting(self, action: Callable[[], T]) -> T:
        if self.is_closed():
            # No connection yet: this statement opens the first one, and failing to open
            # it is not a dropped connection (no warning, no second attempt).
            return action()
        try:
            return action()
        except (peewee.OperationalError, peewee.InterfaceError) as exc:
            from caravel_lite.dialect import dialect_of  # dialect imports this module

            if self.in_transaction() or not dialect_of(self).is_disconnect(exc):
                raise
            logger.warning("database connection lost (%s); reconnecting",
                           type(exc).__name__)
            try:
                self.close()
            except peewee.PeeweeException:
                pass  # the driver refused to close a dead connection; Peewee forgot it
            self.connect()
            reconnects.increment()
        return action()


reconnects = TransientCounter()  # dropped connections replaced, per process


def reconnect_class(cls: type) -> type:
    """A subclass of a server database class with :class:`Reconnect` mixed in."""
    if cls not in _server_classes:
        _server_classes[cls] = type(cls.__name__, (Reconnect, cls), {})
    return _server_classes[cls]


_server_classes: Dict[type, type] = {}


class BusyRetry(_Database):
    """Mixed into the SQLite database class that :func:`open_database` returns.

    SQLite's busy handler waits at most ``busy_timeout`` for another writer and then
    fails with "database is locked"; its sleeps are not fair, so under several writing
    processes one of them can lose every time. A statement that fails that way outside
    a transaction changed nothing (SQLite statements are atomic), so it is run again
    here after a short randomised pause, drawing on the retry budget of the call it
    belongs to (:mod:`caravel_lite.retry`: one budget per call, shared with the queue's
    own repeats), each repeat counted in :data:`transient_retries`. What still fails,
    or fails inside a transaction (where only the caller can repeat its whole unit of
    work), is raised as :class:`~caravel_lite.errors.DatabaseBusy`, which says so; it
    is still a ``peewee.OperationalError``.
    """

    retry_policy = RetryPolicy()
    #: every statement is repeated here within its call's budget, so a caller's own
    #: repeat of a single statement would add nothing (caravel_lite.retry)
    repeats_own_statements = True

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        # The first attempt is a plain call, outside the budget machinery (no closure,
        # no budget): almost every statement succeeds at once, and this is the path of
        # every enqueue. The budget opens only after a lock conflict, counted from the
        # statement's start.
        started = time.monotonic()
        try:
            return super(BusyRetry, self).execute_sql(sql, params)  # type: ignore[no-untyped-call]
        except DatabaseBusy:
            raise
        except peewee.OperationalError as exc:
            if not _sqlite_transient(exc):
                raise
            failure = exc
        run = super(BusyRetry, self).execute_sql
        return self._repeat(lambda: run(sql, params),  # type: ignore[no-untyped-call]
                            self.in_transaction(), started, failure)

    def begin(self, *args: Any, **kwargs: Any) -> None:
        # BEGIN IMMEDIATE that times out has started nothing: safe to repeat.
        action = lambda: super(BusyRetry, self).begin(*args, **kwargs)  # noqa: E731
        started = time.monotonic()
        done, value = _attempt(action)
        if not done:
            self._repeat(action, False, started, value)

    def _repeat(self, action: Callable[[], T], in_transaction: bool, started: float,
                failure: BaseException) -> T:
        """Repeat ``action`` after its first attempt failed with ``failure``, a lock
        conflict, within the call's budget."""
        with call_budget(self, started) as budget:
            while True:
                if in_transaction or not budget.spend():
                    raise DatabaseBusy(_busy_message(
                        in_transaction, budget,
                        self._pragmas_dict().get("busy_timeout"))) from failure
                done, value = _attempt(action)
                if done:
                    return cast(T, value)
                failure = value

    def _pragmas_dict(self) -> Dict[str, Any]:
        return dict(getattr(self, "_pragmas", None) or ())


def _attempt(action: Callable[[], T]) -> Tuple[bool, Any]:
    """(True, the result), or (False, the error) when ``action`` met a transient lock
    conflict; any other error (and a DatabaseBusy, already decided) is raised."""
    try:
        return True, action()
    except DatabaseBusy:
        raise
    except peewee.OperationalError as exc:
        if not _sqlite_transient(exc):
            raise
        return False, exc


def _sqlite_transient(exc: BaseException) -> bool:
    from caravel_lite.dialect import SQLITE  # dialect imports this module

    return SQLITE.is_transient(exc)


def _busy_message(in_transaction: bool, budget: CallBudget, busy_timeout: Any) -> str:
    where = ("inside a transaction: the caller must roll back and repeat its whole unit "
             "of work" if in_transaction else
             f"{budget.describe()}; the statement changed nothing and may be repeated")
    return (f"database is locked: another connection held SQLite's write lock longer "
            f"than busy_timeout ({busy_timeout} ms) {where}; a longer busy_timeout "
            f"suits this much write concurrency")


class SharedMemory(_SqliteDatabase):
    """Mixed into the SQLite class :func:`open_database` returns for
    ``sqlite:///:memory:``: one in-memory database per Database object, shared by every
    connection it opens (Peewee opens one per thread, so a worker's renewal thread sees
    the jobs its loop claims), alive as long as the object.

    SQLite's own ``:memory:`` is private to each connection. Here every connection
    opens the same named shared-cache database, and the object keeps one unused
    connection to it, so that closing the others (``connection_context()``) does not
    drop it. Shared-cache connections lock by table and report a conflict as
    SQLITE_LOCKED at once; those conflicts draw on the call's retry budget like any
    other. ``database`` stays ``":memory:"``: nothing outside this process can open it.
    """

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._shared_uri(), uri=True,
                               timeout=self._timeout,  # type: ignore[attr-defined]
                               isolation_level=None, **self.connect_params)
        try:
            self._add_conn_hooks(conn)  # type: ignore[attr-defined]
        except Exception:
            conn.close()
            raise
        return conn

    def _shared_uri(self) -> str:
        with _memory_lock:
            uri = self.__dict__.get("_memory_uri")
            if uri is None:
                uri = f"file:caravel-memory-{secrets.token_hex(8)}?mode=memory&cache=shared"
                # Never used for statements: it keeps the database alive.
                self._memory_anchor = sqlite3.connect(uri, uri=True,
                                                      check_same_thread=False)
                self._memory_uri = uri
        return uri


_memory_lock = threading.Lock()
MEMORY_NAMES = ("", ":memory:")


def private_memory(db: peewee.Database) -> bool:
    """True for an SQLite in-memory database private to each connection (a plain
    ``SqliteDatabase(":memory:")``): every thread of a worker would see its own empty
    database. ``open_database("sqlite:///:memory:")`` shares one instead."""
    if not isinstance(db, peewee.SqliteDatabase) or isinstance(db, SharedMemory):
        return False
    name = str(db.database).lower()
    if name in MEMORY_NAMES:
        return True
    in_memory = "mode=memory" in name or name.startswith("file::memory:")
    return name.startswith("file:") and in_memory and "cache=shared" not in name


_sqlite_classes: Dict[Tuple[type, bool], type] = {}


def busy_retry_class(cls: type, shared_memory: bool = False) -> type:
    """A subclass of a SQLite database class with :class:`BusyRetry` (and, for an
    in-memory database, :class:`SharedMemory`) mixed in."""
    key = (cls, shared_memory)
    if key not in _sqlite_classes:
        bases = (SharedMemory, BusyRetry, cls) if shared_memory else (BusyRetry, cls)
        _sqlite_classes[key] = type(cls.__name__, bases, {})
    return _sqlite_classes[key]
