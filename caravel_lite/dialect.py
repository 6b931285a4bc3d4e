"""The one module that knows SQLite, PostgreSQL and MariaDB/MySQL differ.

Everything else asks a :class:`Dialect` for a capability (a placeholder, a column type,
a collation, how to open a write transaction, whether an error is worth retrying) and
never branches on the kind of database.
"""
from __future__ import annotations

import contextlib
import random
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar
from urllib.parse import urlsplit, urlunsplit

import peewee
from playhouse import db_url

from caravel_lite.errors import DatabaseBusy

T = TypeVar("T")

# SQLSTATEs PostgreSQL uses for serialization failures and deadlocks.
_PG_TRANSIENT = {"40001", "40P01"}
# MariaDB/MySQL: 1213 deadlock, 1205 lock wait timeout.
_MYSQL_TRANSIENT = {1213, 1205}
# MariaDB/MySQL: the server went away or the connection was lost.
_MYSQL_GONE = {2006, 2013}


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
    # How one UPDATE ... WHERE id IN (SELECT ... LIMIT n) RETURNING ... can claim
    # atomically: the row-lock clause its subquery needs ("" where the statement already
    # runs alone: SQLite has one writer at a time), or None where the claim must take the
    # portable read-then-fenced-UPDATE path.
    claim_lock: Optional[str] = None
    # How an idle worker learns that another connection may have added a job
    # (caravel_lite.wakeup): "notify" (a trigger's NOTIFY, heard by LISTEN),
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

    def insert_rows(self, db: peewee.Database, table: str, columns: Sequence[str],
                    rows: Sequence[Sequence[Any]], insert_many: Callable[[int], str],
                    chunk: int) -> None:
        """Write ``rows`` (values in ``columns`` order) in the current transaction: by
        COPY where the dialect and driver have it, else by multi-row INSERTs of at most
        ``chunk`` rows (``insert_many(n)`` is the statement for n rows). Driver errors
        surface as Peewee's (a duplicate key is ``peewee.IntegrityError``)."""
        if self.copy_rows:
            cursor = db.cursor()
            if hasattr(cursor, "copy"):  # psycopg 3 (psycopg2 has no COPY writer)
                statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
                with peewee.__exception_wrapper__, cursor, cursor.copy(statement) as copy:
                    for row in rows:
                        copy.write_row(row)
                return
            cursor.close()
        for start in range(0, len(rows), chunk):
            part = rows[start:start + chunk]
            db.execute_sql(insert_many(len(part)), [value for row in part for value in row])

    def param(self, db: peewee.Database) -> str:
        return db.param

    @contextlib.contextmanager
    def write_transaction(self, db: peewee.Database) -> Iterator[None]:
        """A transaction for work that reads before it writes; a savepoint when the
        caller already has a transaction open (so a failure here leaves theirs usable)."""
        if db.in_transaction():
            with db.atomic():
                yield
        elif self.immediate_writes:
            with db.atomic("IMMEDIATE"):
                yield
        else:
            with db.atomic():
                yield

    def is_transient(self, exc: BaseException) -> bool:
        """True for a lock conflict that a fresh attempt of the same statement may pass."""
        original = _original(exc)
        if self.name == "sqlite":
            text = str(original).lower()
            return isinstance(exc, peewee.OperationalError) and (
                "database is locked" in text or "database is busy" in text)
        if self.name == "postgres":
            code = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
            return code in _PG_TRANSIENT
        code = _mysql_code(original)
        return code in _MYSQL_TRANSIENT

    def is_disconnect(self, exc: BaseException) -> bool:
        """True when the connection itself is gone (the next statement reconnects)."""
        original = _original(exc)
        if self.name == "mysql":
            return _mysql_code(original) in _MYSQL_GONE
        if self.name == "postgres":
            return isinstance(exc, (peewee.InterfaceError, peewee.OperationalError)) and (
                getattr(original, "sqlstate", None) in (None, "57P01", "08006", "08003"))
        return False


def _original(exc: BaseException) -> BaseException:
    # Peewee re-raises driver errors as its own class with the original as args[0].
    if exc.args and isinstance(exc.args[0], BaseException):
        return exc.args[0]
    return exc


def _mysql_code(exc: BaseException) -> Optional[int]:
    if exc.args and isinstance(exc.args[0], int):
        return exc.args[0]
    return None


SQLITE = Dialect("sqlite", immediate_writes=True, exact_collation=None, payload_type="TEXT",
                 change_signal="data_version", update_returning=True, claim_lock="",
                 partial_indexes=True, without_rowid=True)
POSTGRES = Dialect("postgres", immediate_writes=False, exact_collation=None, payload_type="TEXT",
                   change_signal="notify", update_returning=True,
                   claim_lock="FOR UPDATE SKIP LOCKED", copy_rows=True, partial_indexes=True)
MARIADB = Dialect("mysql", immediate_writes=False, exact_collation="utf8mb4_nopad_bin",
                  payload_type="MEDIUMTEXT")
MYSQL = Dialect("mysql", immediate_writes=False, exact_collation="utf8mb4_0900_bin",
                payload_type="MEDIUMTEXT")


def dialect_of(db: peewee.Database) -> Dialect:
    """The dialect of a Peewee database. MariaDB and MySQL 8 differ only in the name of
    their binary no-pad collation, read from the server version once connected."""
    if isinstance(db, peewee.SqliteDatabase):
        return SQLITE
    if isinstance(db, peewee.PostgresqlDatabase):
        return POSTGRES
    if isinstance(db, peewee.MySQLDatabase):
        if db.server_version is None:
            db.connect(reuse_if_open=True)  # the server version is read on connect
        return MARIADB if _is_mariadb(db) else MYSQL
    raise TypeError(f"caravel_lite supports SQLite, PostgreSQL and MariaDB/MySQL, "
                    f"not {type(db).__name__}")


def _is_mariadb(db: peewee.MySQLDatabase) -> bool:
    return bool(db.mariadb) or (db.server_version or (0,))[0] >= 10


def retrying(dialect: Dialect, db: peewee.Database, action: Callable[[], T],
             attempts: int = 5, on_retry: Optional[Callable[[], None]] = None) -> T:
    """Run a fenced statement, repeating it on a transient lock conflict.

    Only used outside the caller's transaction: inside one, a deadlock has already
    rolled the caller's work back and repeating our statement alone would be wrong.
    """
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except peewee.DatabaseError as exc:
            if attempt == attempts or db.in_transaction() or not dialect.is_transient(exc):
                raise
            if on_retry is not None:
                on_retry()
    raise AssertionError("unreachable")


class TransientCounter:
    """Counts transient errors retried, per process (read by tests and reports)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def increment(self) -> None:
        with self._lock:
            self.value += 1


transient_retries = TransientCounter()


# --- opening a database from a URL -------------------------------------------------

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
    here after a short randomised pause, ``busy_retries`` times, each counted in
    :data:`transient_retries`. What still fails, or fails inside a transaction (where
    only the caller can repeat its whole unit of work), is raised as
    :class:`~caravel_lite.errors.DatabaseBusy`, which says so; it is still a
    ``peewee.OperationalError``.
    """

    busy_retries = 20  # about 1.5 s of pauses in all, on top of busy_timeout
    busy_pause = 0.002  # first pause; doubles up to BUSY_PAUSE_CAP, with jitter

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        return self._busy_retry(lambda: super(BusyRetry, self).execute_sql(sql, params),
                                self.in_transaction())

    def begin(self, *args: Any, **kwargs: Any) -> None:
        # BEGIN IMMEDIATE that times out has started nothing: safe to repeat.
        self._busy_retry(lambda: super(BusyRetry, self).begin(*args, **kwargs), False)

    def _busy_retry(self, action: Callable[[], T], in_transaction: bool) -> T:
        pause = self.busy_pause
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                return action()
            except DatabaseBusy:
                raise
            except peewee.OperationalError as exc:
                if not SQLITE.is_transient(exc):
                    raise
                if in_transaction or attempt >= self.busy_retries:
                    raise DatabaseBusy(_busy_message(
                        in_transaction, attempt + 1, time.monotonic() - started,
                        self._pragmas_dict().get("busy_timeout"))) from exc
            attempt += 1
            transient_retries.increment()
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, BUSY_PAUSE_CAP)

    def _pragmas_dict(self) -> dict:
        return dict(getattr(self, "_pragmas", None) or ())


BUSY_PAUSE_CAP = 0.1


def _busy_message(in_transaction: bool, attempts: int, seconds: float,
                  busy_timeout: Any) -> str:
    where = ("inside a transaction: the caller must roll back and repeat its whole unit "
             "of work" if in_transaction else
             f"after {attempts} attempts over {seconds * 1000:.0f} ms; the statement "
             "changed nothing and may be repeated")
    return (f"database is locked: another connection held SQLite's write lock longer "
            f"than busy_timeout ({busy_timeout} ms) {where}; a longer busy_timeout "
            f"suits this much write concurrency")


_sqlite_classes: dict = {}


def _busy_retry_class(cls: type) -> type:
    """A subclass of a SQLite database class with :class:`BusyRetry` mixed in."""
    if cls not in _sqlite_classes:
        _sqlite_classes[cls] = type(cls.__name__, (BusyRetry, cls), {})
    return _sqlite_classes[cls]


def open_database(url: str, **overrides: Any) -> peewee.Database:
    """Open (lazily: nothing connects yet) a Peewee database from a URL as
    ``playhouse.db_url`` reads it, with the session settings caravel_lite expects:

    - ``sqlite:///path``: WAL journal, 5 s busy timeout, and statements that still find
      the database locked repeated a few times (see :class:`BusyRetry`;
      ``busy_retries=0`` turns that off);
    - ``postgresql://...``: READ COMMITTED (the server default), autocommit;
    - ``mysql://...``: READ COMMITTED session, matched-row counting, strict sql_mode.
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
    if isinstance(database, peewee.SqliteDatabase):
        arguments = db_url.parse(url)
        arguments.update(options)
        database = _busy_retry_class(type(database))(**arguments)
        if busy_retries is not None:
            database.busy_retries = int(busy_retries)
    return database


def with_database_name(url: str, name: str) -> str:
    """The same server URL pointing at another database (used by tests and tools)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
