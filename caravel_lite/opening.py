"""Opening a database from a URL (:func:`open_database`): the session settings
caravel_lite expects on each kind of database, the connection layer's own classes
(:mod:`caravel_lite.sessions`), and clear refusals of what cannot work as written (a
SQLite URL Peewee would misread, a server whose driver is not installed)."""
from __future__ import annotations

import importlib
import os
from typing import Any, Dict, Optional, cast

import peewee

from caravel_lite import pymysql_tls, sessions
from caravel_lite.errors import CaravelError
from caravel_lite.retry import RetryPolicy

__all__ = ["open_database", "SQLITE_PRAGMAS", "SERVER_TIMEOUTS", "MissingDriver",
           "database_file", "literal_percent", "with_database_name"]


class MissingDriver(CaravelError, RuntimeError):
    """The URL names a server whose Python driver is not installed; the message names
    the extra that installs it."""


# Which driver each server scheme needs (any one of the modules), and the extra that
# installs it. The MariaDB/MySQL session options are PyMySQL's.
_DRIVERS = {"postgres": (("psycopg", "psycopg2"), "postgres"),
            "postgresql": (("psycopg", "psycopg2"), "postgres"),
            "mysql": (("pymysql",), "mysql")}

# SQLite's settings on every connection open_database makes. WAL: readers never block
# the writer. The automatic checkpoint stays at SQLite's 1,000 pages: with FULL
# (SQLite's default) every 10,000 made each commit grow the log file and its sync cost
# more (`python -m bench.checkpoints --database sqlite-full --pages 1000,10000 --jobs
# 1500`: 4,574 against 3,075 enqueues a second, median of three rounds), so the
# default is left alone.
SQLITE_PRAGMAS: Dict[str, Any] = {"journal_mode": "wal", "busy_timeout": 5000}

# Connection timeouts on the servers, unless the URL or the caller names them. A
# connect gives up after 10 s instead of waiting for the operating system's (minutes).
# PostgreSQL (libpq): data sent and unacknowledged for 30 s drops the connection
# (tcp_user_timeout, Linux), and an idle connection is probed after 30 s, every 10 s,
# dropped after 3 unanswered probes: a real partition ends a blocked statement instead
# of leaving it waiting for ever. (A statement's own bound is :func:`bounded`, which
# also works where TCP is acknowledged locally, through a proxy.)
SERVER_TIMEOUTS: Dict[str, Dict[str, Any]] = {
    "postgres": {"connect_timeout": 10, "tcp_user_timeout": 30000, "keepalives": 1,
                 "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3},
    "mysql": {"connect_timeout": 10, "tcp_user_timeout": 30000, "keepalives_idle": 30,
              "keepalives_interval": 10, "keepalives_count": 3},
}
# PyMySQL takes no TCP options: these are set on its socket after each connect
# (caravel_lite.connections.set_tcp_timeouts), under libpq's names. Without them a
# partition held a MariaDB statement until the kernel gave up (tcp_retries2: about
# 15 minutes) and probed an idle connection after 2 hours.
_SOCKET_OPTIONS = ("tcp_user_timeout", "keepalives_idle", "keepalives_interval",
                   "keepalives_count")
_SQLITE_HINT = ("use sqlite:///PATH (three slashes; four for an absolute path: "
                "sqlite:////var/lib/app/queue.db)")


# urllib.parse and playhouse.db_url (with the SQLite extension modules it imports) are
# imported by the functions that read a URL, not at import: together they were about a
# tenth of caravel_lite's import time, paid at every start of a process that may never
# open a database from a URL (one passing its own peewee.Database). These functions
# run once per database opened, on no hot path.


def _scheme(url: str) -> str:
    from urllib.parse import urlsplit

    return urlsplit(url).scheme.split("+")[0]


def check_sqlite_url(url: str) -> None:
    """Refuse a SQLite URL that Peewee would misread: ``sqlite:relative.db`` (its parser
    drops the first character of the path) and ``sqlite://relative.db`` (the path read
    as a host)."""
    from urllib.parse import urlsplit

    scheme, _, rest = url.partition(":")
    if not rest.startswith("//"):
        raise ValueError(f"{url!r} is not a SQLite URL Peewee reads as written; "
                         f"{_SQLITE_HINT}")
    if urlsplit(url).netloc:
        raise ValueError(f"{url!r} names a host ({urlsplit(url).netloc!r}), which a "
                         f"SQLite file has not; {_SQLITE_HINT}")


def check_driver(scheme: str) -> None:
    """Raise :class:`MissingDriver` when the driver of a server scheme is missing."""
    modules, extra = _DRIVERS.get(scheme, ((), ""))
    if modules and not any(_importable(name) for name in modules):
        raise MissingDriver(f"{scheme} URLs need the {modules[0]} driver: "
                            f"pip install 'caravel_lite[{extra}]'")


def _importable(module: str) -> bool:
    # Imported, not just found: a driver that is there but cannot load (a missing
    # libpq, a broken build) is as missing as one not installed. Peewee has already
    # tried to import each at its own import, so this costs a dictionary lookup.
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


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


def open_database(url: str, **overrides: Any) -> peewee.Database:
    """Open (lazily: nothing connects yet) a Peewee database from a URL as
    ``playhouse.db_url`` reads it, with the session settings caravel_lite expects:

    - ``sqlite:///path``: WAL journal and a 5 s busy timeout (:data:`SQLITE_PRAGMAS`;
      ``pragmas=`` adds to or replaces them key by key, and a key given as None is left
      unset), and statements that still find the database locked repeated within
      the call's retry budget (see :class:`BusyRetry`); ``sqlite:///:memory:`` is one
      in-memory database shared by the object's threads (:class:`SharedMemory`).
      ``sqlite:relative.db`` and ``sqlite://relative.db``, which Peewee misreads, are
      refused (``ValueError``, with the ``sqlite:///PATH`` form);
    - ``postgresql://...``: READ COMMITTED (the server default), autocommit;
    - ``mysql://...``: READ COMMITTED session, matched-row counting, strict sql_mode;
    - on both servers: connect, TCP and keepalive timeouts (:data:`SERVER_TIMEOUTS`,
      each replaced by the URL's query or a keyword argument of the same name), and a
      connection known to be dead (the server closed it, a bound shut it down) is
      replaced before the next statement is sent, never after (:class:`Reconnect`);
      without the driver installed, :class:`MissingDriver` names the extra.

    ``busy_retries=N`` (any database) sets how many repeats one call may make in all
    after a lock conflict (default 100, within 2 s: :class:`RetryPolicy`); 0 turns
    repeating off.
    """
    from playhouse import db_url

    scheme = _scheme(url)
    if scheme.startswith("sqlite"):
        check_sqlite_url(url)
    check_driver(scheme)
    options: Dict[str, Any] = {}
    defaults: Dict[str, Any] = dict(SERVER_TIMEOUTS.get(
        "postgres" if scheme.startswith("postgres") else scheme, {}))
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
    arguments = {**defaults, **db_url.parse(url), **options}
    if isinstance(database, peewee.SqliteDatabase):
        shared = str(database.database) in sessions.MEMORY_NAMES
        database = sessions.busy_retry_class(type(database), shared)(**arguments)
    else:
        tcp: Dict[str, Any] = {}
        if scheme == "mysql":
            tcp = {name: int(arguments.pop(name)) for name in _SOCKET_OPTIONS
                   if name in arguments}
        base = type(database)
        if scheme == "mysql" and pymysql_tls.applies():
            base = pymysql_tls.mysql_class(base)
        database = sessions.reconnect_class(base)(**arguments)
        database.tcp_timeouts = tcp
    if busy_retries is not None:
        retries = int(busy_retries)
        if retries < 0:
            raise ValueError(f"busy_retries must be 0 or more, got {busy_retries!r}")
        database.retry_policy = RetryPolicy(retries=retries)
    return cast(peewee.Database, database)


def database_file(db: peewee.Database) -> Optional[str]:
    """The file a SQLite database lives in, or None (a server, an in-memory database,
    a ``file:`` URI whose mode decides)."""
    if not isinstance(db, peewee.SqliteDatabase):
        return None
    name = str(db.database)
    if name in sessions.MEMORY_NAMES or name.startswith("file:"):
        return None
    return os.path.abspath(name)


def literal_percent(db: peewee.Database) -> str:
    """How a ``%`` operator is written in SQL text run with parameters: doubled where
    the driver's placeholders are ``%s`` (psycopg, PyMySQL), as is elsewhere."""
    return "%%" if db.param == "%s" else "%"


def with_database_name(url: str, name: str) -> str:
    """The same server URL pointing at another database (used by tests and tools)."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
