"""How each kind of database reports what went wrong: a lock conflict worth another
attempt, a connection that is gone, a fault that waiting cannot fix, a statement too
large for the server. One classifier per kind of database; a
:class:`caravel_lite.dialect.Dialect` carries its own, so every error is judged by the
database that raised it (``dialect_of(db).is_disconnect(exc)``), never by another's.

Judged on the driver's error codes wherever the driver gives one, never on caravel_lite's
own messages: a :class:`DatabaseBusy` says a call's retry budget is spent and is never
transient.
"""
from __future__ import annotations

from typing import Optional, Tuple

import peewee

from caravel_lite.errors import DatabaseBusy

__all__ = ["ErrorCodes", "SqliteErrors", "PostgresErrors", "MysqlErrors", "original_error"]

# SQLSTATEs PostgreSQL uses for serialization failures, deadlocks and a lock wait that
# ran out (lock_timeout).
_PG_TRANSIENT = {"40001", "40P01", "55P03"}
# PostgreSQL: the backend was terminated or the server is shutting down or starting
# (class 08, connection exceptions, is matched by its prefix).
_PG_GONE = {"57P01", "57P02", "57P03"}
# SQLite's primary result codes for "another connection holds the lock".
_SQLITE_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
# SQLite's primary result code of a database file that cannot be opened (the low byte
# of sqlite3's extended sqlite_errorcode).
_SQLITE_CANTOPEN = 14
# MariaDB/MySQL: 1213 deadlock, 1205 lock wait timeout.
_MYSQL_TRANSIENT = {1213, 1205}
# MariaDB/MySQL: the server went away, the connection was lost or timed out.
_MYSQL_GONE = {2006, 2013, 4031}
# MariaDB/MySQL: a packet larger than max_allowed_packet (ER_NET_PACKET_TOO_LARGE,
# ER_TOO_BIG_FOR_UNCOMPRESS... seen as 1153 and 1301).
_MYSQL_TOO_LARGE = {1153, 1301}
# MariaDB/MySQL: 1044/1045 access denied; 1049 unknown database; 1146/1054 no such
# table/column.
_MYSQL_UNFIXABLE = {1044, 1045, 1049, 1146, 1054}
# A statement at least this large whose connection dropped while it was sent was
# refused for its size (what MariaDB does past max_allowed_packet).
_LARGE_STATEMENT = 1024 * 1024


def original_error(exc: BaseException) -> BaseException:
    """The driver's exception behind a Peewee one. Peewee re-raises driver errors as
    its own class, keeping the original as ``orig`` (Peewee 4), as args[0] (older
    Peewee) and as the exception being handled."""
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


def _connection_error(exc: BaseException) -> bool:
    return isinstance(exc, (peewee.InterfaceError, peewee.OperationalError))


class ErrorCodes:
    """What one kind of database's errors mean. The base reads every error as what it
    is not: not transient, not a lost connection, fixable, not too large."""

    #: the top-level modules of the drivers whose exceptions this classifier reads
    drivers: Tuple[str, ...] = ()

    def raised(self, exc: BaseException) -> bool:
        """True when ``exc`` (or the driver error behind it) comes from one of this
        kind of database's drivers: which database of several raised it."""
        module = type(original_error(exc)).__module__.split(".")[0]
        return module in self.drivers

    def is_transient(self, exc: BaseException) -> bool:
        """A lock conflict that a fresh attempt of the same statement may pass."""
        return False

    def is_disconnect(self, exc: BaseException) -> bool:
        """The connection itself is gone (killed, timed out, the server restarted): a
        new connection may succeed where this one cannot."""
        return False

    def is_unfixable(self, exc: BaseException) -> bool:
        """A fault that waiting cannot fix: the schema is not there (not migrated, wrong
        database), the server refuses this login, or the database cannot be opened at
        all. A loop riding out an outage exits at once on these."""
        return False

    def refused_as_too_large(self, exc: BaseException, size: int) -> bool:
        """A statement of ``size`` bytes failed because it was too large."""
        return False


class SqliteErrors(ErrorCodes):
    drivers = ("sqlite3", "pysqlite3", "sqlean")

    def is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, DatabaseBusy):
            return False
        original = original_error(exc)
        code = getattr(original, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in _SQLITE_BUSY
        text = str(original).lower()  # drivers without error codes
        return isinstance(exc, peewee.OperationalError) and (
            "database is locked" in text or "database is busy" in text)

    def is_unfixable(self, exc: BaseException) -> bool:
        # SQLITE_CANTOPEN: a directory that does not exist, a path without permission,
        # a directory given as the file. SQLite has no server to come back: the same
        # path fails the same way until someone fixes it.
        original = original_error(exc)
        text = str(original).lower()
        code = getattr(original, "sqlite_errorcode", None)  # Python 3.11+
        return ((code is not None and code & 0xFF == _SQLITE_CANTOPEN)
                or "unable to open database file" in text
                or "no such table" in text or "no such column" in text)


class PostgresErrors(ErrorCodes):
    drivers = ("psycopg", "psycopg2", "psycopg2cffi")

    def is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, DatabaseBusy):
            return False
        original = original_error(exc)
        code = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
        return code in _PG_TRANSIENT

    def is_disconnect(self, exc: BaseException) -> bool:
        if not _connection_error(exc):
            return False
        # psycopg reports a closed or broken connection without a SQLSTATE.
        code = getattr(original_error(exc), "sqlstate", None)
        return code is None or code.startswith("08") or code in _PG_GONE

    def is_unfixable(self, exc: BaseException) -> bool:
        original = original_error(exc)
        code = getattr(original, "sqlstate", None)
        if code is not None:
            # 28xxx: authorization refused; 3D000: no such database; 42P01/42703:
            # undefined table/column.
            return code.startswith("28") or code in ("3D000", "42P01", "42703")
        # Refusals at connect time may come without a SQLSTATE.
        text = str(original).lower()
        return ("authentication failed" in text or "no password supplied" in text
                or ("database" in text and "does not exist" in text)
                or ("role" in text and "does not exist" in text))


class MysqlErrors(ErrorCodes):
    drivers = ("pymysql", "MySQLdb")

    def is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, DatabaseBusy):
            return False
        return _mysql_code(original_error(exc)) in _MYSQL_TRANSIENT

    def is_disconnect(self, exc: BaseException) -> bool:
        if not _connection_error(exc):
            return False
        code = _mysql_code(original_error(exc))
        # InterfaceError (0, ''): PyMySQL reusing a connection it already closed.
        return code in _MYSQL_GONE or (code == 0 and isinstance(exc, peewee.InterfaceError))

    def is_unfixable(self, exc: BaseException) -> bool:
        return _mysql_code(original_error(exc)) in _MYSQL_UNFIXABLE

    def refused_as_too_large(self, exc: BaseException, size: int) -> bool:
        # The server's own error, or (what MariaDB does past max_allowed_packet) the
        # connection dropped while so large a statement was being sent.
        code = _mysql_code(original_error(exc))
        if code in _MYSQL_TOO_LARGE:
            return True
        dropped = code in _MYSQL_GONE or isinstance(exc, peewee.InterfaceError)
        return dropped and size >= _LARGE_STATEMENT
