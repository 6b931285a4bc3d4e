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
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Optional, Sequence, Tuple, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

import peewee
from playhouse import db_url

from caravel_lite.errors import DatabaseBusy, SchemaLockTimeout, StatementTooLarge
from caravel_lite.retry import RetryPolicy, TransientCounter, retrying, transient_retries
from caravel_lite.statement_size import PACKET_MARGIN, cut_rows

__all__ = ["Dialect", "ClaimMethod", "PrunePacing", "dialect_of", "open_database",
           "retrying", "transient_retries", "TransientCounter", "RetryPolicy",
           "with_database_name"]

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
_LARGE_STATEMENT = 1024 * 1024


@dataclass(frozen=True)
class PrunePacing:
    """How a prune (caravel_lite.admin.retention) shares the database with the claims
    and completions running meanwhile: ``batch`` jobs per short transaction unless the
    caller names another size, and after each batch a pause of ``share`` times as long
    as that batch took plus ``margin`` seconds before the next one starts."""

    batch: int
    share: float
    margin: float = 0.0

    def pause(self, elapsed: float) -> float:
        """Seconds to wait after a batch that took ``elapsed`` seconds."""
        return self.share * max(elapsed, 0.0) + self.margin


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
    # How a prune yields to claims between its batches (:class:`PrunePacing`). Where
    # the database has row locks (PostgreSQL, InnoDB) a claim never waits for a
    # batch's rows, only for the server's time: batches of 1,000 and a shorter pause.
    # SQLite has one writer at a time: a claim that finds a batch holding the write
    # lock sleeps in SQLite's busy handler (1, 2, 5, 10, 15, 20, 25 ... 100 ms between
    # tries: each sleep at most 2 ms longer than the wait so far), so it wakes at most
    # a batch's length plus 2 ms after the batch ends; a pause at least that long
    # finds it the lock free. Small batches keep that wait short.
    prune_pacing: PrunePacing = PrunePacing(batch=1000, share=0.25)

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
                # Peewee's error translation (its stubs do not declare the wrapper).
                wrapper = getattr(peewee, "__exception_wrapper__")
                with wrapper, cursor, cursor.copy(statement) as copy:
                    for row in rows:
                        copy.write_row(row)
                return
            cursor.close()
        for part, size in cut_rows(rows, chunk, max_bytes, len(insert_many(1))):
            try:
                db.execute_sql(insert_many(len(part)),
                               [value for row in part for value in row])
            except (peewee.OperationalError, peewee.InterfaceError) as exc:
                if max_bytes is not None and self.refused_as_too_large(exc, size):
                    raise StatementTooLarge(
                        f"the server refused an INSERT of {len(part)} row(s), about "
                        f"{size} bytes as sent, and dropped the connection: over its "
                        f"max_allowed_packet (read as {max_bytes + PACKET_MARGIN} bytes); "
                        f"raise max_allowed_packet or enqueue smaller batches",
                        max_bytes + PACKET_MARGIN, size) from exc
                raise

    def check_rows(self, rows: Sequence[Sequence[Any]], max_bytes: int, fixed: int) -> None:
        """Raise :class:`StatementTooLarge` unless each row fits in a statement of
        ``max_bytes`` (``fixed``: the statement's own text)."""
        for _ in cut_rows(rows, 1, max_bytes, fixed):
            pass

    def statement_limit(self, db: peewee.Database) -> Optional[int]:
        """The most bytes one statement may take as sent, or None where the database
        sets no such limit below what a batch can reach (MariaDB/MySQL:
        ``max_allowed_packet``, less a margin for the packet's framing)."""
        if self.packet_limit_sql is None:
            return None
        limit = int(db.execute_sql(self.packet_limit_sql).fetchone()[0])
        return max(limit - PACKET_MARGIN, 1)

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
        (not migrated, wrong database), the server refuses this login, or (SQLite) the
        database file cannot be opened at all. A worker riding out an outage exits at
        once on these."""
        original = _original(exc)
        text = str(original).lower()
        if self.name == "sqlite":
            # SQLITE_CANTOPEN: a directory that does not exist, a path without
            # permission, a directory given as the file. SQLite has no server to come
            # back: the same path fails the same way until someone fixes it.
            code = getattr(original, "sqlite_errorcode", None)  # Python 3.11+
            return ((code is not None and code & 0xFF == _SQLITE_CANTOPEN)
                    or "unable to open database file" in text
                    or "no such table" in text or "no such column" in text)
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


# SQLite's primary result code of a database file that cannot be opened (the low byte
# of sqlite3's extended sqlite_errorcode).
_SQLITE_CANTOPEN = 14

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
    # Peewee re-raises driver errors as its own class, keeping the original as
    # ``orig`` (Peewee 4), as args[0] (older Peewee) and as the exception being handled.
    orig = getattr(exc, "orig", None)
    if isinstance(orig, BaseException):
        return orig
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
                 partial_indexes=True, without_rowid=True, index_hint="INDEXED BY {index}",
                 prune_pacing=PrunePacing(batch=100, share=1.0, margin=0.002))
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

def _mysql_session_options() -> Dict[str, Any]:
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


# SQLite's settings on every connection open_database makes. WAL: readers never block
# the writer. The automatic checkpoint stays at SQLite's 1,000 pages: with FULL
# (SQLite's default) every 10,000 made each commit grow the log file and its sync cost
# more (`python -m bench.checkpoints --database sqlite-full --pages 1000,10000 --jobs
# 1500`: 4,574 against 3,075 enqueues a second, median of three rounds), so the
# default is left alone.
SQLITE_PRAGMAS: Dict[str, Any] = {"journal_mode": "wal", "busy_timeout": 5000}


def open_database(url: str, **overrides: Any) -> peewee.Database:
    """Open (lazily: nothing connects yet) a Peewee database from a URL as
    ``playhouse.db_url`` reads it, with the session settings caravel_lite expects:

    - ``sqlite:///path``: WAL journal and a 5 s busy timeout (:data:`SQLITE_PRAGMAS`;
      ``pragmas=`` adds to or replaces them key by key, and a key given as None is left
      unset), and statements that still find the database locked repeated within
      the call's retry budget (see :class:`BusyRetry`); ``sqlite:///:memory:`` is one
      in-memory database shared by the object's threads (:class:`SharedMemory`);
    - ``postgresql://...``: READ COMMITTED (the server default), autocommit;
    - ``mysql://...``: READ COMMITTED session, matched-row counting, strict sql_mode;
    - on both servers, a dropped connection is replaced on the next statement run
      outside a transaction (:class:`Reconnect`).

    ``busy_retries=N`` (any database) sets how many repeats one call may make in all
    after a lock conflict (default 100, within 2 s: :class:`RetryPolicy`); 0 turns
    repeating off.
    """
    scheme = urlsplit(url).scheme.split("+")[0]
    options: Dict[str, Any] = {}
    busy_retries = overrides.pop("busy_retries", None)
    if scheme == "sqlite":
        options = {"pragmas": dict(SQLITE_PRAGMAS), "timeout": 5}
        # The caller's pragmas are added to ours, key by key: naming one must not
        # silently drop WAL mode or the busy timeout. A key given as None is not set
        # at all (a read-only connection cannot switch the journal to WAL).
        extra = overrides.pop("pragmas", None)
        if extra is not None:
            options["pragmas"].update(dict(extra))
            options["pragmas"] = {name: value for name, value in options["pragmas"].items()
                                  if value is not None}
    elif scheme == "mysql":
        options = _mysql_session_options()
    options.update(overrides)
    database = db_url.connect(url, **options)  # validates the URL; connects to nothing
    arguments = db_url.parse(url)
    arguments.update(options)
    if isinstance(database, peewee.SqliteDatabase):
        shared = str(database.database) in sessions.MEMORY_NAMES
        database = sessions.busy_retry_class(type(database), shared)(**arguments)
    else:
        database = sessions.reconnect_class(type(database))(**arguments)
    if busy_retries is not None:
        retries = int(busy_retries)
        if retries < 0:
            raise ValueError(f"busy_retries must be 0 or more, got {busy_retries!r}")
        database.retry_policy = RetryPolicy(retries=retries)
    return cast(peewee.Database, database)


def literal_percent(db: peewee.Database) -> str:
    """How a ``%`` operator is written in SQL text run with parameters: doubled where
    the driver's placeholders are ``%s`` (psycopg, PyMySQL), as is elsewhere."""
    return "%%" if db.param == "%s" else "%"


def with_database_name(url: str, name: str) -> str:
    """The same server URL pointing at another database (used by tests and tools)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


# The databases open_database returns: defined apart, re-exported here (the module is
# imported last, since it reads SQLITE and dialect_of from this one).
from caravel_lite import sessions  # noqa: E402
from caravel_lite.sessions import (BusyRetry, Reconnect, SharedMemory,  # noqa: E402,F401
                                   private_memory, reconnects)
