"""The one module that knows SQLite, PostgreSQL and MariaDB/MySQL differ.

Everything else asks a :class:`Dialect` for a capability (a placeholder, a column type,
a collation, how to open a write transaction, whether an error is worth retrying) and
never branches on the kind of database.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import hashlib
import secrets
import sqlite3
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple, TypeVar
from urllib.parse import urlsplit, urlunsplit

import peewee
from playhouse import db_url

from caravel_lite.errors import DatabaseBusy, SchemaLockTimeout, StatementTooLarge
from caravel_lite.observability import logger
from caravel_lite.retry import (CallBudget, RetryPolicy, TransientCounter, call_budget,
                                retrying, transient_retries)

__all__ = ["Dialect", "ClaimMethod", "dialect_of", "open_database", "retrying",
           "transient_retries", "TransientCounter", "RetryPolicy", "with_database_name"]

T = TypeVar("T")

# SQLSTATEs PostgreSQL uses for serialization failures, deadlocks and a lock wait that
# ran out (lock_timeout).
_PG_TRANSIENT = {"40001", "40P01", "55P03"}
# SQLite's primary result codes for "another connection holds the lock".
_SQLITE_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
# MariaDB/MySQL: 1213 deadlock, 1205 lock wait timeout.
_MYSQL_TRANSIENT = {1213, 1205}
# MariaDB/MySQL: the server went away, the connection was lost or timed out.
_MYSQL_GONE = {2006, 2013, 4031}
# PostgreSQL: the backend was terminated or the server is shutting down or starting
# (class 08, connection exceptions, is matched by its prefix).
_PG_GONE = {"57P01", "57P02", "57P03"}
# MariaDB/MySQL: a packet larger than max_allowed_packet (ER_NET_PACKET_TOO_LARGE,
# ER_TOO_BIG_FOR_UNCOMPRESS... seen as 1153 and 1301).
_MYSQL_TOO_LARGE = {1153, 1301}
# Bytes of max_allowed_packet kept free for the packet's framing and what the size
# estimate of a row does not count exactly.
_PACKET_MARGIN = 64 * 1024
# A dropped connection during a statement at least this large is read as a refusal of
# its size (smaller statements are not a plausible cause).
_LARGE_STATEMENT = 1024 * 1024


class ClaimMethod(str, enum.Enum):
    RETURNING = "returning"
    LOCKED_READ = "locked_read"
    PORTABLE = "portable"


@dataclass(frozen=True)
class Dialect:
    """Capabilities of one kind of database."""

    name: str
    # True when statements that read then write must take the write lock up front
    # (SQLite: a deferred transaction that reads first fails with "database is locked"
    # instead of waiting when another writer holds the lock).
    immediate_writes: bool
    # Collation giving exact (case- and trailing-space-sensitive) text comparison, or
    # None where the default comparison already is exact.
    exact_collation: Optional[str]
    # Column type that holds at least 1 MiB of text.
    payload_type: str
    # UPDATE ... RETURNING is available (SQLite 3.35+, PostgreSQL; not MariaDB/MySQL).
    update_returning: bool = False
    # The row-lock clause a claim's read of candidates takes ("" where the claim
    # already runs alone: SQLite has one writer at a time), or None where the claim
    # must take the portable read-then-fenced-UPDATE path (MariaDB before 10.6, MySQL
    # before 8.0.1: no SKIP LOCKED). See :attr:`claim_method`.
    claim_lock: Optional[str] = None
    # How an idle worker learns that another connection may have added a job
    # (caravel_lite.worker.waiter): "notify" (a trigger's NOTIFY, heard by LISTEN),
    # "data_version" (PRAGMA data_version changes when another connection commits) or
    # "poll" (no cheap signal: claim again every poll_interval).
    change_signal: str = "poll"
    # Indexes may carry a WHERE clause and hold only the rows that match it (SQLite,
    # PostgreSQL; not MariaDB/MySQL). Rows outside the predicate cost an insert or
    # update no write to that index (migration 0004 and caravel_lite.schema use it).
    partial_indexes: bool = False
    # A table keyed by text can be stored as one B-tree ordered by its primary key
    # (SQLite's WITHOUT ROWID; InnoDB always does this and PostgreSQL has no such
    # layout). Otherwise SQLite keeps a rowid B-tree plus a separate primary-key
    # index: one more B-tree, and one more page, for every committed insert
    # (migration 0005).
    without_rowid: bool = False

    # Batches of new rows can be streamed with COPY ... FROM STDIN (PostgreSQL through
    # psycopg 3) instead of multi-row INSERTs: no statement with thousands of parameters
    # is built, sent and parsed (docs/PERFORMANCE.md, bulk enqueue, has the figures).
    copy_rows: bool = False
    # The query that reads how many bytes one statement may take as sent, where the
    # server refuses larger ones by dropping the connection (MariaDB/MySQL:
    # max_allowed_packet); multi-row INSERTs are cut below it.
    packet_limit_sql: Optional[str] = None
    # How concurrent migrations exclude each other for their whole run
    # (caravel_lite.migrator): "advisory" (PostgreSQL session advisory lock),
    # "named" (MariaDB/MySQL GET_LOCK, named after the database) or
    # "write_transaction" (SQLite: the run is one BEGIN IMMEDIATE transaction).
    schema_lock: str = "write_transaction"
    # Index names belong to their table (MariaDB/MySQL: DROP INDEX name ON table)
    # rather than to the schema (SQLite, PostgreSQL: DROP INDEX name).
    table_scoped_indexes: bool = False
    # How a statement names the index it must read a table through, where the planner
    # can be told and needs to be (operator views, caravel_lite.admin): SQLite keeps
    # no histogram of a column's values (no STAT4 in Python's builds), so once
    # statistics exist (ANALYZE, PRAGMA optimize) it can prefer a skip-scan of another
    # index to a range of finished_at; MariaDB reads ``queue = ? AND state = ? ORDER
    # BY id DESC LIMIT n`` by walking the primary key and filtering, which for a rare
    # queue or state reads most of the table. PostgreSQL takes no hints (and needs
    # none once it sees the values, see caravel_lite.admin.filters.name_literal).
    index_hint: Optional[str] = None

    def table_via(self, table: str, index: str) -> str:
        """``table`` as a FROM/DELETE target read through ``index`` where the dialect
        takes a hint, else just ``table``."""
        return f"{table} {self.index_hint.format(index=index)}" if self.index_hint else table

    def drop_index(self, name: str, table: str) -> str:
        """The statement that drops index ``name`` of ``table``."""
        return f"DROP INDEX {name} ON {table}" if self.table_scoped_indexes \
            else f"DROP INDEX {name}"

    @property
    def claim_method(self) -> "ClaimMethod":
        """How this database claims (caravel_lite.claim): one UPDATE ... RETURNING over
        locked-or-skipped candidates, a short transaction of a SKIP LOCKED read and an
        UPDATE (no UPDATE ... RETURNING), or the portable fenced path."""
        if self.claim_lock is None:
            return ClaimMethod.PORTABLE
        return ClaimMethod.RETURNING if self.update_returning else ClaimMethod.LOCKED_READ

    def portable(self) -> "Dialect":
        """The same dialect claiming by the portable path (what a server without SKIP
        LOCKED does; tests run the contract suite through it on every database)."""
        return dataclasses.replace(self, claim_lock=None)

    def insert_rows(self, db: peewee.Database, table: str, columns: Sequence[str],
                    rows: Sequence[Sequence[Any]], insert_many: Callable[[int], str],
                    chunk: int, max_bytes: Optional[int] = None) -> None:
        """Write ``rows`` (values in ``columns`` order) in the current transaction: by
        COPY where the dialect and driver have it, else by multi-row INSERTs of at most
        ``chunk`` rows (``insert_many(n)`` is the statement for n rows) and, when
        ``max_bytes`` is given (:meth:`statement_limit`), at most that many bytes as
        sent. A row that cannot fit, or a statement the server still refuses, raises
        :class:`StatementTooLarge` naming the limit. Other driver errors surface as
        Peewee's (a duplicate key is ``peewee.IntegrityError``)."""
        if self.copy_rows:
            cursor = db.cursor()
            if hasattr(cursor, "copy"):  # psycopg 3 (psycopg2 has no COPY writer)
                statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
                with peewee.__exception_wrapper__, cursor, cursor.copy(statement) as copy:
                    for row in rows:
                        copy.write_row(row)
                return
            cursor.close()
        for part, size in _statements(rows, chunk, max_bytes, len(insert_many(1))):
            try:
                db.execute_sql(insert_many(len(part)),
                               [value for row in part for value in row])
            except (peewee.OperationalError, peewee.InterfaceError) as exc:
                if max_bytes is not None and self.refused_as_too_large(exc, size):
                    raise StatementTooLarge(
                        f"the server refused an INSERT of {len(part)} row(s), about "
                        f"{size} bytes as sent, and dropped the connection: over its "
                        f"max_allowed_packet (read as {max_bytes + _PACKET_MARGIN} bytes); "
                        f"raise max_allowed_packet or enqueue smaller batches",
                        max_bytes + _PACKET_MARGIN, size) from exc
                raise

    def check_rows(self, rows: Sequence[Sequence[Any]], max_bytes: int, fixed: int) -> None:
        """Raise :class:`StatementTooLarge` unless each row fits in a statement of
        ``max_bytes`` (``fixed``: the statement's own text)."""
        for _ in _statements(rows, 1, max_bytes, fixed):
            pass

    def statement_limit(self, db: peewee.Database) -> Optional[int]:
        """The most bytes one statement may take as sent, or None where the database
        sets no such limit below what a batch can reach (MariaDB/MySQL:
        ``max_allowed_packet``, less a margin for the packet's framing)."""
        if self.packet_limit_sql is None:
            return None
        limit = int(db.execute_sql(self.packet_limit_sql).fetchone()[0])
        return max(limit - _PACKET_MARGIN, 1)

    def refused_as_too_large(self, exc: BaseException, size: int) -> bool:
        """True when a statement of ``size`` bytes failed because it was too large:
        the server's own error, or (what MariaDB does past max_allowed_packet) the
        connection dropped while so large a statement was being sent."""
        code = _mysql_code(_original(exc))
        if code in _MYSQL_TOO_LARGE:
            return True
        dropped = code in _MYSQL_GONE or isinstance(exc, peewee.InterfaceError)
        return dropped and size >= _LARGE_STATEMENT

    @contextlib.contextmanager
    def migration_lock(self, db: peewee.Database, timeout: float) -> Iterator[None]:
        """Hold the database's migration lock for the duration of the block, waiting up
        to ``timeout`` seconds for another holder (then :class:`SchemaLockTimeout`).
        On SQLite the block runs inside one write transaction."""
        deadline = time.monotonic() + timeout
        if self.schema_lock == "advisory":
            # A polled try-lock: a lock_timeout set on the session cannot cut the wait
            # short, and the wait stays bounded by ``timeout``.
            _wait_for_lock(lambda: bool(db.execute_sql(
                "SELECT pg_try_advisory_lock(%s)" % _MIGRATION_KEY).fetchone()[0]),
                deadline, timeout)
            try:
                yield
            finally:
                db.execute_sql("SELECT pg_advisory_unlock(%s)" % _MIGRATION_KEY)
        elif self.schema_lock == "named":
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
                    if self.is_transient(exc) or isinstance(exc, DatabaseBusy):
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

    def param(self, db: peewee.Database) -> str:
        return db.param

    @contextlib.contextmanager
    def write_transaction(self, db: peewee.Database) -> Iterator[None]:
        """A transaction for work that reads before it writes; a savepoint when the
        caller already has a transaction open (so a failure here leaves theirs usable;
        a savepoint rather than a nested atomic(), which peewee refuses inside
        ``manual_commit()``)."""
        if db.in_transaction():
            with db.savepoint():
                yield
        elif self.immediate_writes:
            with db.atomic("IMMEDIATE"):
                yield
        else:
            with db.atomic():
                yield

    def is_transient(self, exc: BaseException) -> bool:
        """True for a lock conflict that a fresh attempt of the same statement may pass,
        judged on the driver's error code (never on our own messages: a
        :class:`DatabaseBusy` says a call's retry budget is spent, and is never
        transient)."""
        if isinstance(exc, DatabaseBusy):
            return False
        original = _original(exc)
        if self.name == "sqlite":
            code = getattr(original, "sqlite_errorcode", None)
            if code is not None:
                return code & 0xFF in _SQLITE_BUSY
            text = str(original).lower()  # drivers without error codes
            return isinstance(exc, peewee.OperationalError) and (
                "database is locked" in text or "database is busy" in text)
        if self.name == "postgres":
            code = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
            return code in _PG_TRANSIENT
        code = _mysql_code(original)
        return code in _MYSQL_TRANSIENT

    def is_disconnect(self, exc: BaseException) -> bool:
        """True when the connection itself is gone (killed, timed out, the server
        restarted): a new connection may succeed where this one cannot."""
        if not isinstance(exc, (peewee.InterfaceError, peewee.OperationalError)):
            return False
        original = _original(exc)
        if self.name == "mysql":
            code = _mysql_code(original)
            # InterfaceError (0, ''): PyMySQL reusing a connection it already closed.
            return code in _MYSQL_GONE or (code == 0 and isinstance(exc, peewee.InterfaceError))
        if self.name == "postgres":
            # psycopg reports a closed or broken connection without a SQLSTATE.
            code = getattr(original, "sqlstate", None)
            return code is None or code.startswith("08") or code in _PG_GONE
        return False

    def is_unfixable(self, exc: BaseException) -> bool:
        """True for a database error that waiting cannot fix: the schema is not there
        (not migrated, wrong database) or the server refuses this login. A worker
        riding out an outage exits at once on these."""
        original = _original(exc)
        text = str(original).lower()
        if self.name == "sqlite":
            return "no such table" in text or "no such column" in text
        if self.name == "postgres":
            code = getattr(original, "sqlstate", None)
            if code is not None:
                # 28xxx: authorization refused; 3D000: no such database; 42P01/42703:
                # undefined table/column.
                return code.startswith("28") or code in ("3D000", "42P01", "42703")
            # Refusals at connect time may come without a SQLSTATE.
            return ("authentication failed" in text or "no password supplied" in text
                    or ("database" in text and "does not exist" in text)
                    or ("role" in text and "does not exist" in text))
        # 1044/1045: access denied; 1049: unknown database; 1146/1054: no such
        # table/column.
        return _mysql_code(original) in (1044, 1045, 1049, 1146, 1054)


# Characters the MariaDB/MySQL drivers escape with a backslash inside a string literal.
_ESCAPED = ("\\", "'", '"', "\n", "\r", "\x00", "\x1a")
# Below this many characters a text's size is bounded (4 bytes a character, each
# escaped) instead of measured.
_MEASURE_FROM = 256


def _literal_size(value: Any) -> int:
    """Bytes a value takes as a literal in a statement text, as the MariaDB/MySQL
    drivers send it (a quoted, escaped UTF-8 string; a number; NULL): exact for long
    text, an upper bound for short text."""
    if isinstance(value, str):
        if len(value) < _MEASURE_FROM:
            return 8 * len(value) + 2
        return (len(value.encode("utf-8")) + sum(value.count(c) for c in _ESCAPED) + 2)
    if value is None:
        return 4
    return len(str(value))


def _statements(rows: Sequence[Sequence[Any]], chunk: int, max_bytes: Optional[int],
                fixed: int) -> Iterator[Tuple[Sequence[Sequence[Any]], int]]:
    """Cut ``rows`` into runs of at most ``chunk`` rows and, with ``max_bytes``, at
    most that many bytes (``fixed``: the statement text for one row, counted once);
    yields each run with its estimated size."""
    if max_bytes is None:
        for start in range(0, len(rows), chunk):
            yield rows[start:start + chunk], 0
        return
    start, size = 0, fixed
    for index, row in enumerate(rows):
        row_size = sum(_literal_size(value) + 2 for value in row) + 4
        if fixed + row_size > max_bytes:
            raise StatementTooLarge(
                f"row {index} of the batch takes about {fixed + row_size} bytes as sent, "
                f"over the server's max_allowed_packet (read as {max_bytes + _PACKET_MARGIN} "
                f"bytes, {_PACKET_MARGIN} of them kept for framing); raise "
                f"max_allowed_packet or lower max_payload_bytes",
                max_bytes + _PACKET_MARGIN, fixed + row_size)
        if index > start and (index - start >= chunk or size + row_size > max_bytes):
            yield rows[start:index], size
            start, size = index, fixed
        size += row_size
    if start < len(rows):
        yield rows[start:], size


# The PostgreSQL advisory lock key of caravel_lite's migrations (advisory locks are
# scoped to the current database): the first 8 bytes of sha256("caravel_lite.migrate").
_MIGRATION_KEY = int.from_bytes(hashlib.sha256(b"caravel_lite.migrate").digest()[:8],
                                "big", signed=True)


def _wait_for_lock(acquire: Callable[[], bool], deadline: float, timeout: float) -> None:
    pause = 0.05
    while not acquire():
        if time.monotonic() >= deadline:
            raise SchemaLockTimeout(
                f"another process held caravel_lite's migration lock for more than "
                f"{timeout:g} s; it is still migrating, or it stopped while holding it")
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def _original(exc: BaseException) -> BaseException:
    # Peewee re-raises driver errors as its own class, with the original as args[0]
    # (sqlite3, PyMySQL) or only as the exception being handled (psycopg 3).
    if exc.args and isinstance(exc.args[0], BaseException):
        return exc.args[0]
    for linked in (exc.__cause__, exc.__context__):
        if linked is not None and not isinstance(linked, peewee.PeeweeException):
            return linked
    return exc


def _mysql_code(exc: BaseException) -> Optional[int]:
    if exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


SQLITE = Dialect("sqlite", immediate_writes=True, exact_collation=None, payload_type="TEXT",
                 change_signal="data_version", update_returning=True, claim_lock="",
                 partial_indexes=True, without_rowid=True, index_hint="INDEXED BY {index}")
POSTGRES = Dialect("postgres", immediate_writes=False, exact_collation=None, payload_type="TEXT",
                   change_signal="notify", update_returning=True,
                   claim_lock="FOR UPDATE SKIP LOCKED", copy_rows=True, partial_indexes=True,
                   schema_lock="advisory")
# MariaDB 10.6+ and MySQL 8.0.1+ skip locked rows in a locking read; older servers
# claim by the portable path (MARIADB.portable(), MYSQL.portable()).
_SKIP_LOCKED = "FOR UPDATE SKIP LOCKED"
_PACKET_LIMIT = "SELECT @@max_allowed_packet"
MARIADB = Dialect("mysql", immediate_writes=False, exact_collation="utf8mb4_nopad_bin",
                  payload_type="MEDIUMTEXT", claim_lock=_SKIP_LOCKED,
                  table_scoped_indexes=True, packet_limit_sql=_PACKET_LIMIT,
                  schema_lock="named", index_hint="FORCE INDEX ({index})")
MYSQL = Dialect("mysql", immediate_writes=False, exact_collation="utf8mb4_0900_bin",
                payload_type="MEDIUMTEXT", claim_lock=_SKIP_LOCKED, table_scoped_indexes=True,
                packet_limit_sql=_PACKET_LIMIT, schema_lock="named",
                index_hint="FORCE INDEX ({index})")
_SKIP_LOCKED_SINCE = {"mariadb": (10, 6), "mysql": (8, 0, 1)}


def dialect_of(db: peewee.Database) -> Dialect:
    """The dialect of a Peewee database. MariaDB and MySQL 8 differ in the name of their
    binary no-pad collation, and servers before MariaDB 10.6 / MySQL 8.0.1 have no
    SKIP LOCKED: both read from the server version once connected."""
    if isinstance(db, peewee.SqliteDatabase):
        return SQLITE
    if isinstance(db, peewee.PostgresqlDatabase):
        return POSTGRES
    if isinstance(db, peewee.MySQLDatabase):
        if db.server_version is None:
            db.connect(reuse_if_open=True)  # the server version is read on connect
        mariadb = _is_mariadb(db)
        dialect = MARIADB if mariadb else MYSQL
        since = _SKIP_LOCKED_SINCE["mariadb" if mariadb else "mysql"]
        return dialect if tuple(db.server_version or ()) >= since else dialect.portable()
    raise TypeError(f"caravel_lite supports SQLite, PostgreSQL and MariaDB/MySQL, "
                    f"not {type(db).__name__}")


def _is_mariadb(db: peewee.MySQLDatabase) -> bool:
    return bool(db.mariadb) or (db.server_version or (0,))[0] >= 10


# --- opening a database from a URL -------------------------------------------------

class Reconnect:
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
        return self._reconnecting(lambda: super(Reconnect, self).execute_sql(sql, params))

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


def _reconnect_class(cls: type) -> type:
    """A subclass of a server database class with :class:`Reconnect` mixed in."""
    if cls not in _server_classes:
        _server_classes[cls] = type(cls.__name__, (Reconnect, cls), {})
    return _server_classes[cls]


_server_classes: dict = {}


def _mysql_session_options() -> dict:
    from pymysql.constants import CLIENT  # imported lazily: an optional driver

    return {
        # Count matched rather than changed rows, so an UPDATE that writes identical
        # values still reports the row it fenced.
        "client_flag": CLIENT.FOUND_ROWS,
        # Plain reads and conditional UPDATEs under READ COMMITTED did not deadlock under
        # concurrent claims; REPEATABLE READ with locking reads did.
        "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        "sql_mode": "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO",
    }


class BusyRetry:
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

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        return self._busy_retry(lambda: super(BusyRetry, self).execute_sql(sql, params),
                                self.in_transaction())

    def begin(self, *args: Any, **kwargs: Any) -> None:
        # BEGIN IMMEDIATE that times out has started nothing: safe to repeat.
        self._busy_retry(lambda: super(BusyRetry, self).begin(*args, **kwargs), False)

    def _busy_retry(self, action: Callable[[], T], in_transaction: bool) -> T:
        with call_budget(self) as budget:
            while True:
                try:
                    return action()
                except DatabaseBusy:
                    raise
                except peewee.OperationalError as exc:
                    if not SQLITE.is_transient(exc):
                        raise
                    if in_transaction or not budget.spend():
                        raise DatabaseBusy(_busy_message(
                            in_transaction, budget,
                            self._pragmas_dict().get("busy_timeout"))) from exc

    def _pragmas_dict(self) -> dict:
        return dict(getattr(self, "_pragmas", None) or ())


def _busy_message(in_transaction: bool, budget: CallBudget, busy_timeout: Any) -> str:
    where = ("inside a transaction: the caller must roll back and repeat its whole unit "
             "of work" if in_transaction else
             f"{budget.describe()}; the statement changed nothing and may be repeated")
    return (f"database is locked: another connection held SQLite's write lock longer "
            f"than busy_timeout ({busy_timeout} ms) {where}; a longer busy_timeout "
            f"suits this much write concurrency")


class SharedMemory:
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
        conn = sqlite3.connect(self._shared_uri(), uri=True, timeout=self._timeout,
                               isolation_level=None, **self.connect_params)
        try:
            self._add_conn_hooks(conn)
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
_MEMORY_NAMES = ("", ":memory:")


def private_memory(db: peewee.Database) -> bool:
    """True for an SQLite in-memory database private to each connection (a plain
    ``SqliteDatabase(":memory:")``): every thread of a worker would see its own empty
    database. ``open_database("sqlite:///:memory:")`` shares one instead."""
    if not isinstance(db, peewee.SqliteDatabase) or isinstance(db, SharedMemory):
        return False
    name = str(db.database).lower()
    if name in _MEMORY_NAMES:
        return True
    in_memory = "mode=memory" in name or name.startswith("file::memory:")
    return name.startswith("file:") and in_memory and "cache=shared" not in name


_sqlite_classes: dict = {}


def _busy_retry_class(cls: type, shared_memory: bool = False) -> type:
    """A subclass of a SQLite database class with :class:`BusyRetry` (and, for an
    in-memory database, :class:`SharedMemory`) mixed in."""
    key = (cls, shared_memory)
    if key not in _sqlite_classes:
        bases = (SharedMemory, BusyRetry, cls) if shared_memory else (BusyRetry, cls)
        _sqlite_classes[key] = type(cls.__name__, bases, {})
    return _sqlite_classes[key]


def open_database(url: str, **overrides: Any) -> peewee.Database:
    """Open (lazily: nothing connects yet) a Peewee database from a URL as
    ``playhouse.db_url`` reads it, with the session settings caravel_lite expects:

    - ``sqlite:///path``: WAL journal, 5 s busy timeout, and statements that still find
      the database locked repeated within the call's retry budget (see
      :class:`BusyRetry`); ``sqlite:///:memory:`` is one in-memory database shared by
      the object's threads (:class:`SharedMemory`);
    - ``postgresql://...``: READ COMMITTED (the server default), autocommit;
    - ``mysql://...``: READ COMMITTED session, matched-row counting, strict sql_mode;
    - on both servers, a dropped connection is replaced on the next statement run
      outside a transaction (:class:`Reconnect`).

    ``busy_retries=N`` (any database) sets how many repeats one call may make in all
    after a lock conflict (default 20, within 2 s: :class:`RetryPolicy`); 0 turns
    repeating off.
    """
    scheme = urlsplit(url).scheme.split("+")[0]
    options: dict = {}
    busy_retries = overrides.pop("busy_retries", None)
    if scheme == "sqlite":
        options = {"pragmas": {"journal_mode": "wal", "busy_timeout": 5000}, "timeout": 5}
    elif scheme == "mysql":
        options = _mysql_session_options()
    options.update(overrides)
    database = db_url.connect(url, **options)  # validates the URL; connects to nothing
    arguments = db_url.parse(url)
    arguments.update(options)
    if isinstance(database, peewee.SqliteDatabase):
        shared = str(database.database) in _MEMORY_NAMES
        database = _busy_retry_class(type(database), shared)(**arguments)
    else:
        database = _reconnect_class(type(database))(**arguments)
    if busy_retries is not None:
        retries = int(busy_retries)
        if retries < 0:
            raise ValueError(f"busy_retries must be 0 or more, got {busy_retries!r}")
        database.retry_policy = RetryPolicy(retries=retries)
    return database


def literal_percent(db: peewee.Database) -> str:
    """How a ``%`` operator is written in SQL text run with parameters: doubled where
    the driver's placeholders are ``%s`` (psycopg, PyMySQL), as is elsewhere."""
    return "%%" if db.param == "%s" else "%"


def with_database_name(url: str, name: str) -> str:
    """The same server URL pointing at another database (used by tests and tools)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
