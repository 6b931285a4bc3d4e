"""What the databases :func:`caravel_lite.dialect.open_database` returns do besides
Peewee's own: SQLite statements repeated within the call's retry budget
(:class:`BusyRetry`), one shared in-memory SQLite database per object
(:class:`SharedMemory`), and dead server connections replaced before a statement is
sent, never by sending one again (:class:`Reconnect`). Each asks the dialect how to read an error; none knows which
database it runs on (caravel_lite.dialect imports this module and re-exports its
names)."""
from __future__ import annotations

import logging
import secrets
import sqlite3
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Tuple, TypeVar, cast

import peewee

from caravel_lite.connections import (StatementTimedOut, discard_connection, fired_bound,
                                      known_dead, open_bounds, set_tcp_timeouts)
from caravel_lite.errors import DatabaseBusy
from caravel_lite.logfields import fields
from caravel_lite.retry import CallBudget, RetryPolicy, TransientCounter, call_budget

# caravel_lite.observability's logger, by its name: importing that module from here
# closed a cycle (observability -> tracing -> schema -> dialect -> this module) that
# failed whenever one of them was the first caravel_lite module a program imported.
logger = logging.getLogger("caravel_lite")

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
    returns: a dead connection is replaced before a statement is sent on it, never by
    sending the statement again.

    - Before a statement (or BEGIN) outside a transaction, a connection known to be
      dead is closed and a new one opened: the driver marked it closed, or the server
      already closed its end or sent its termination notice (a restart, a killed
      session, an idle timeout; :func:`caravel_lite.connections.known_dead`, one
      non-blocking poll). Nothing was sent on it, so nothing is lost or repeated.
    - A statement that fails because the connection dropped while it ran is NOT run
      again: whether the server carried it out is unknown. Outside a transaction the
      dead connection is closed (the next statement opens a new one) and the error
      reaches the caller; each operation of the queue recovers by reading back what it
      owns (a claim its lease token, an enqueue its job id; the lease operations are
      fenced and repeated), see docs/RELIABILITY.md. Inside a transaction the error
      reaches the caller too: the transaction's work is lost and only the caller can
      repeat it.
    - A BEGIN that fails so is sent once more on a new connection: it carried no work.
      Inside ``manual_commit()`` blocks (which peewee counts as a transaction before
      their BEGIN) a dead connection is replaced at the BEGIN too, the blocks kept.
    - The statements of a :func:`caravel_lite.connections.bounded` block are watched
      by its watchdog; one it interrupted fails with ``StatementTimedOut``.

    Each connection replaced or discarded is counted in :data:`reconnects` and logged
    as a warning.
    """

    #: every connection a statement is sent on is shown to the open bounded() blocks
    watches_bounds = True

    #: TCP options set on each new connection's socket, for a driver that takes none
    #: (PyMySQL; :func:`caravel_lite.connections.set_tcp_timeouts`)
    tcp_timeouts: Dict[str, int] = {}

    def _initialize_connection(self, conn: Any) -> None:
        super(Reconnect, self)._initialize_connection(conn)  # type: ignore[misc]
        set_tcp_timeouts(conn, self.tcp_timeouts)

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        if not self.in_transaction():
            self._replace_if_dead()
        try:
            return super(Reconnect, self).execute_sql(sql, params)  # type: ignore[no-untyped-call]
        except (peewee.OperationalError, peewee.InterfaceError) as exc:
            raise self._failed(exc)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self._interrupted()
            raise

    def commit(self) -> None:
        try:
            super(Reconnect, self).commit()
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self._interrupted()
            raise

    def rollback(self) -> None:
        if self.__dict__.get("_cut_short") is self._state.conn:  # type: ignore[attr-defined]
            # The transaction's connection was cut short mid-statement by an
            # interrupt: no ROLLBACK is sent on it (PyMySQL has closed it, psycopg may
            # still be reading the reply), and none fails over the interrupt being
            # raised. Closing it ends the transaction on the server, rolled back.
            self._cut_short = None
            discard_connection(self)
            return
        super(Reconnect, self).rollback()

    def _interrupted(self) -> None:
        """An interrupt (``KeyboardInterrupt``, a signal handler's ``SystemExit``) was
        raised while a statement ran: the driver may be mid-reply, so this connection
        is never used again (outside a transaction it is closed now; inside one, at
        its rollback, which sends nothing on it)."""
        logger.warning("database statement cut short by %s; its connection is closed",
                       "an interrupt", extra=fields(reason="interrupt"))
        if self.in_transaction():
            self._cut_short = self._state.conn  # type: ignore[attr-defined]
        else:
            discard_connection(self)

    def begin(self, *args: Any, **kwargs: Any) -> None:
        # BEGIN runs before Peewee records the transaction: nothing is lost here yet.
        if self._manual_only():
            self._reopen_keeping_manual()
        else:
            self._replace_if_dead()
        dropped = not self.is_closed()
        try:
            super(Reconnect, self).begin(*args, **kwargs)
            return
        except (peewee.OperationalError, peewee.InterfaceError) as exc:
            error = self._failed(exc)
            if error is not exc or not self.is_closed() or not dropped:
                raise error  # timed out, not a dropped connection, or none opened
        super(Reconnect, self).begin(*args, **kwargs)

    def cursor(self, named_cursor: Any = None) -> Any:
        bounds = open_bounds(self)
        fired = fired_bound(self) if bounds else None
        if fired is not None:
            # Past a bound nothing more is sent, nor a connection opened for it.
            raise _timed_out(fired)
        cursor = super(Reconnect, self).cursor(named_cursor)  # type: ignore[no-untyped-call]
        for bound in bounds:  # the connection this statement is about to be sent on
            bound.watch(self._state.conn)  # type: ignore[attr-defined]
        return cursor

    def _manual_only(self) -> bool:
        """Inside ``manual_commit()`` blocks and no transaction: peewee counts the block
        as one (``in_transaction()``), though nothing is open on the server yet."""
        stack = self._state.transactions  # type: ignore[attr-defined]
        return bool(stack) and all(isinstance(entry, peewee._manual) for entry in stack)

    def _reopen_keeping_manual(self) -> None:
        """Before the BEGIN of a manual block: replace a dead connection, or open a
        closed one, keeping the block on peewee's transaction stack (which its close and
        connect clear: the block would end with IndexError, and what runs in it would
        take itself to be outside a transaction)."""
        state = self._state  # type: ignore[attr-defined]
        if fired_bound(self) is not None:
            return  # past a bound nothing is connected: the BEGIN fails at once
        if not self.is_closed() and not known_dead(state.conn, self._idle_messages()):
            return
        stack = state.transactions
        state.transactions = []
        try:
            if not self.is_closed():
                self._discard("connection lost (found closed before a statement was sent)")
            self.connect()
        finally:
            state.transactions = stack

    def _replace_if_dead(self) -> None:
        if self.is_closed():
            return  # the next statement opens the first connection
        if known_dead(self._state.conn, self._idle_messages()):  # type: ignore[attr-defined]
            self._discard("connection lost (found closed before a statement was sent)")

    def _failed(self, exc: Exception) -> Exception:
        """What the caller gets for a statement that failed with ``exc``; a dropped
        connection outside a transaction is closed first."""
        from caravel_lite.dialect import dialect_of  # dialect imports this module

        bound = fired_bound(self)
        timed_out = bound is not None
        if not (timed_out or dialect_of(self).is_disconnect(exc)):
            return exc
        if self.is_closed() and not timed_out:
            return exc  # no connection could be opened: nothing was dropped
        if not self.in_transaction():
            self._discard(f"connection lost ({type(exc).__name__})")
        if timed_out:
            assert bound is not None
            error = _timed_out(bound)
            error.__cause__ = exc
            return error
        return exc

    def _discard(self, why: str) -> None:
        logger.warning("database %s; the next statement opens a new connection", why,
                       extra=fields(reason=why))
        discard_connection(self)
        reconnects.increment()

    def _idle_messages(self) -> bytes:
        messages = self.__dict__.get("_idle_messages_of")
        if messages is None:
            from caravel_lite.dialect import dialect_of

            messages = self._idle_messages_of = dialect_of(self).idle_messages
        return cast(bytes, messages)


def _timed_out(bound: Any) -> StatementTimedOut:
    return cast(StatementTimedOut, bound.error())


reconnects = TransientCounter()  # dead connections closed or replaced, per process


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
