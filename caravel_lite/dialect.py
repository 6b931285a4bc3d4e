"""The one place that knows SQLite, PostgreSQL and MariaDB/MySQL differ, as capabilities.

Everything else asks a :class:`Dialect` for a capability (a placeholder, a column type,
a collation, how to open a write transaction, whether an error is worth retrying) and
never branches on the kind of database. The capabilities live here; how each database
reports its errors in :mod:`caravel_lite.error_codes` (each dialect carries its own
classifier), the migration lock in :mod:`caravel_lite.migration_lock`, opening a
database from a URL in :mod:`caravel_lite.opening`, and what the databases it opens do
besides Peewee's own in :mod:`caravel_lite.sessions` and :mod:`caravel_lite.connections`.
Every name stays importable from here.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, TypeVar

import peewee

from caravel_lite.error_codes import ErrorCodes, MysqlErrors, PostgresErrors, SqliteErrors
from caravel_lite.errors import StatementTooLarge
from caravel_lite.migration_lock import migration_lock as _migration_lock
from caravel_lite.retry import RetryPolicy, TransientCounter, retrying, transient_retries
from caravel_lite.statement_size import PACKET_MARGIN, cut_rows

__all__ = ["Dialect", "ClaimMethod", "PrunePacing", "dialect_of", "open_database",
           "retrying", "transient_retries", "TransientCounter", "RetryPolicy",
           "with_database_name", "literal_percent", "bounded", "StatementTimedOut",
           "MissingDriver", "errors_of", "SQLITE", "POSTGRES", "MARIADB", "MYSQL"]

T = TypeVar("T")


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
    # The clause that locks the rows a read returns until its transaction ends, so that
    # what was read is what a later statement of the transaction writes ("" where a
    # write transaction already excludes every other writer: SQLite's BEGIN
    # IMMEDIATE). Every supported server has it, also those without SKIP LOCKED.
    row_lock: str = "FOR UPDATE"
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
    # The column the flow index (caravel_lite.fairness) keys a job's state on. Where
    # indexes cannot be partial that index holds every row, so it keys on a virtual
    # column that is the state of a job with a group and NULL for any other (migration
    # 0013): a claim or completion of a job outside gated queues leaves its entry alone.
    flow_state: str = "state"
    # A table keyed by text can be stored as one B-tree ordered by its primary key
    # (SQLite's WITHOUT ROWID; InnoDB always does this and PostgreSQL has no such
    # layout). Otherwise SQLite keeps a rowid B-tree plus a separate primary-key
    # index: one more B-tree, and one more page, for every committed insert
    # (migration 0005).
    without_rowid: bool = False
    # The database runs inside this process (SQLite): no connection can drop between a
    # statement and its reply, so no reply is ever lost and nothing needs recovering
    # (caravel_lite.retry.recovering). A single statement then runs directly.
    in_process: bool = False

    # How the claim's UPDATE names the rows its candidates CTE ("picked") chose, so
    # that they are found by primary key whatever the planner's statistics say.
    # PostgreSQL planned ``id IN (SELECT id FROM picked)`` as a hash semi-join over a
    # sequential scan of the whole jobs table, once per claim (with statistics on a
    # table of 5,000 rows as without them on a new one); an array of the picked ids is
    # an index condition on the primary key. SQLite looks the subquery's ids up by
    # primary key already.
    picked_ids: str = "id IN (SELECT id FROM picked)"
    # How a statement names a list of rows by key ("{column}" compared with the
    # parameter marks "{marks}"), for the batch completion and the other reads and
    # writes of listed ids. PostgreSQL plans ``id IN (<n values>)`` on a table without
    # statistics (a table filled and drained within autovacuum's first minute) from
    # the row width the schema declares: the wider the row, the fewer rows it assumes
    # a page holds, and past a point every batch completion read the whole table
    # instead of its n primary keys (5,000 jobs drained: 97 of 102 completions). An
    # array built by a subquery is a value the planner cannot count, so it keeps the
    # index, with statistics as without.
    listed: str = "{column} IN ({marks})"

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
    # How this database reports what went wrong (caravel_lite.error_codes): every error
    # is judged by the classifier of the database that raised it.
    errors: ErrorCodes = ErrorCodes()
    # The first bytes of the messages a server may send an idle session that stays
    # alive (PostgreSQL: notification, notice, parameter status); anything else, or the
    # end of the stream, on an idle connection means it is gone and is replaced before
    # a statement is sent (caravel_lite.connections.known_dead).
    idle_messages: bytes = b""

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
        return self.errors.refused_as_too_large(exc, size)

    def migration_lock(self, db: peewee.Database,
                       timeout: float) -> "contextlib.AbstractContextManager[None]":
        """Hold the database's migration lock for the duration of the block, waiting up
        to ``timeout`` seconds for another holder (then :class:`SchemaLockTimeout`).
        On SQLite the block runs inside one write transaction."""
        return _migration_lock(self, db, timeout)

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
        return self.errors.is_transient(exc)

    def is_disconnect(self, exc: BaseException) -> bool:
        """True when the connection itself is gone (killed, timed out, the server
        restarted, a :func:`bounded` block shut it down): a new connection may succeed
        where this one cannot. Whether a statement that failed so was carried out is
        unknown."""
        from caravel_lite.connections import StatementTimedOut

        return isinstance(exc, StatementTimedOut) or self.errors.is_disconnect(exc)

    def is_unfixable(self, exc: BaseException) -> bool:
        """True for a database error that waiting cannot fix: the schema is not there
        (not migrated, wrong database), the server refuses this login, or (SQLite) the
        database file cannot be opened at all. A worker riding out an outage exits at
        once on these."""
        return self.errors.is_unfixable(exc)


SQLITE = Dialect("sqlite", immediate_writes=True, in_process=True, exact_collation=None, payload_type="TEXT",
                 change_signal="data_version", update_returning=True, claim_lock="", row_lock="",
                 partial_indexes=True, without_rowid=True, index_hint="INDEXED BY {index}",
                 prune_pacing=PrunePacing(batch=100, share=1.0, margin=0.002),
                 errors=SqliteErrors())
POSTGRES = Dialect("postgres", immediate_writes=False, exact_collation=None, payload_type="TEXT",
                   change_signal="notify", update_returning=True,
                   claim_lock="FOR UPDATE SKIP LOCKED", copy_rows=True, partial_indexes=True,
                   schema_lock="advisory", errors=PostgresErrors(), idle_messages=b"ANS",
                   picked_ids="id = ANY(ARRAY(SELECT id FROM picked))",
                   listed="{column} = ANY(ARRAY(SELECT unnest(ARRAY[{marks}])))")
# MariaDB 10.6+ and MySQL 8.0.1+ skip locked rows in a locking read; older servers
# claim by the portable path (MARIADB.portable(), MYSQL.portable()).
_SKIP_LOCKED = "FOR UPDATE SKIP LOCKED"
_PACKET_LIMIT = "SELECT @@max_allowed_packet"
MARIADB = Dialect("mysql", immediate_writes=False, exact_collation="utf8mb4_nopad_bin",
                  payload_type="MEDIUMTEXT", claim_lock=_SKIP_LOCKED,
                  table_scoped_indexes=True, packet_limit_sql=_PACKET_LIMIT,
                  schema_lock="named", index_hint="FORCE INDEX ({index})",
                  flow_state="flow_state", errors=MysqlErrors())
MYSQL = Dialect("mysql", immediate_writes=False, exact_collation="utf8mb4_0900_bin",
                payload_type="MEDIUMTEXT", claim_lock=_SKIP_LOCKED, table_scoped_indexes=True,
                packet_limit_sql=_PACKET_LIMIT, schema_lock="named",
                index_hint="FORCE INDEX ({index})", flow_state="flow_state",
                errors=MysqlErrors())
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


def errors_of(db: peewee.Database) -> ErrorCodes:
    """How ``db``'s errors read (its dialect's classifier), without connecting: unlike
    :func:`dialect_of`, which reads a MariaDB/MySQL server's version, this works while
    the server is away (MariaDB and MySQL report errors alike)."""
    if isinstance(db, peewee.MySQLDatabase):
        return MARIADB.errors
    return dialect_of(db).errors


def _is_mariadb(db: peewee.MySQLDatabase) -> bool:
    return bool(db.mariadb) or (db.server_version or (0,))[0] >= 10


# Opening a database from a URL, and the databases it returns: defined apart,
# re-exported here (imported last: sessions reads SQLITE and dialect_of from here).
from caravel_lite import sessions  # noqa: E402,F401
from caravel_lite.connections import StatementTimedOut, bounded  # noqa: E402,F401
from caravel_lite.opening import (SERVER_TIMEOUTS, SQLITE_PRAGMAS,  # noqa: E402,F401
                                  MissingDriver, literal_percent, open_database,
                                  with_database_name)
from caravel_lite.sessions import (BusyRetry, Reconnect, SharedMemory,  # noqa: E402,F401
                                   private_memory, reconnects)
