"""The databases a run measures, and a fresh, uniquely named database per case.

Server databases are created with the prefix ``caravel_bench_`` and only those are
dropped; SQLite files live in a temporary directory removed at the end.
"""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass, replace
from typing import Iterator, Optional

PREFIX = "caravel_bench_"

SERVERS = {
    "postgres": os.environ.get("CARAVEL_BENCH_POSTGRES", "127.0.0.1:5432"),
    "mysql": os.environ.get("CARAVEL_BENCH_MYSQL", "127.0.0.1:3306"),
}


@dataclass(frozen=True)
class Target:
    """One database configuration. ``kind`` is sqlite, postgres or mysql."""

    key: str                       # as chosen on the command line
    kind: str
    label: str
    synchronous: Optional[str] = None   # SQLite only: NORMAL or FULL (always WAL)
    name: Optional[str] = None          # server database name, once provisioned
    path: Optional[str] = None          # SQLite file, once provisioned

    @property
    def host(self) -> str:
        return SERVERS[self.kind].split(":")[0]

    @property
    def port(self) -> int:
        return int(SERVERS[self.kind].split(":")[1])

    @property
    def user(self) -> str:
        return "postgres" if self.kind == "postgres" else "root"

    @property
    def url(self) -> str:
        """A peewee/playhouse URL (also a libpq URL for PostgreSQL)."""
        if self.kind == "sqlite":
            return f"sqlite:///{self.path}"
        scheme = "postgresql" if self.kind == "postgres" else "mysql"
        return f"{scheme}://{self.user}@{self.host}:{self.port}/{self.name}"

    @property
    def sqlite_pragmas(self) -> dict:
        return {"journal_mode": "wal", "synchronous": self.synchronous, "busy_timeout": 5000}


TARGETS = {
    "sqlite-normal": Target("sqlite-normal", "sqlite", "SQLite WAL, synchronous=NORMAL",
                            synchronous="NORMAL"),
    "sqlite-full": Target("sqlite-full", "sqlite", "SQLite WAL, synchronous=FULL",
                          synchronous="FULL"),
    "postgres": Target("postgres", "postgres", "PostgreSQL"),
    "mysql": Target("mysql", "mysql", "MariaDB"),
}


def _admin_execute(target: Target, statement: str) -> None:
    if target.kind == "postgres":
        import psycopg
        with psycopg.connect(host=target.host, port=target.port, user=target.user,
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(statement)
    else:
        import pymysql
        conn = pymysql.connect(host=target.host, port=target.port, user=target.user)
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement)
        finally:
            conn.close()


def server_reachable(target: Target) -> Optional[str]:
    """None when the target can be used, else the reason it cannot."""
    if target.kind == "sqlite":
        return None
    try:
        _admin_execute(target, "SELECT 1")
    except Exception as exc:  # any failure to reach the server is the reason to skip
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


class Workspace:
    """Owns the temporary directory for SQLite files of one run."""

    def __init__(self) -> None:
        self.directory = tempfile.mkdtemp(prefix=PREFIX)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


@contextlib.contextmanager
def fresh(target: Target, workspace: Workspace) -> Iterator[Target]:
    """A new empty database for one case, removed afterwards."""
    name = PREFIX + secrets.token_hex(5)
    if target.kind == "sqlite":
        path = os.path.join(workspace.directory, name + ".db")
        try:
            yield replace(target, path=path)
        finally:
            for suffix in ("", "-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path + suffix)
        return
    charset = " CHARACTER SET utf8mb4" if target.kind == "mysql" else ""
    _admin_execute(target, f"CREATE DATABASE {name}{charset}")
    try:
        yield replace(target, name=name)
    finally:
        assert name.startswith(PREFIX)
        force = " WITH (FORCE)" if target.kind == "postgres" else ""
        _admin_execute(target, f"DROP DATABASE IF EXISTS {name}{force}")
