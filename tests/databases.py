"""Where the test databases live, and how each test gets a fresh, migrated one.

Backends are chosen with CARAVEL_TEST_DATABASES (comma-separated: sqlite, postgres,
mysql; default all three). Server URLs come from CARAVEL_TEST_POSTGRES_URL and
CARAVEL_TEST_MYSQL_URL (an administrative database on the server; the tests create and
drop their own databases beside it, never touching any other). Without a reachable
server the backend's tests skip with the reason, except under CI=true, where an
unreachable database fails the run.
"""
from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from typing import Callable, List, Optional

import peewee

from caravel_lite.dialect import open_database, with_database_name

ALL_BACKENDS = ("sqlite", "postgres", "mysql")
SERVER_URLS = {
    "postgres": os.environ.get("CARAVEL_TEST_POSTGRES_URL",
                               "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": os.environ.get("CARAVEL_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
}
PREFIX = "caravel_t_"


def selected_backends() -> List[str]:
    raw = os.environ.get("CARAVEL_TEST_DATABASES", ",".join(ALL_BACKENDS))
    chosen = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = set(chosen) - set(ALL_BACKENDS)
    if unknown:
        raise RuntimeError(f"CARAVEL_TEST_DATABASES names unknown backends: {sorted(unknown)}")
    return chosen


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unreachable_reason(backend: str) -> Optional[str]:
    """None when the backend's server answers, else why not."""
    if backend == "sqlite":
        return None
    db = open_database(SERVER_URLS[backend])
    try:
        db.connect()
        db.execute_sql("SELECT 1")
    except Exception as exc:  # any failure to reach the server is the reason
        return f"{backend} server at {SERVER_URLS[backend]} is unreachable: {type(exc).__name__}: {exc}"
    finally:
        if not db.is_closed():
            db.close()
    return None


@dataclass
class ServerDatabases:
    """Creates and drops uniquely named databases on one server (never any other)."""

    backend: str

    def __post_init__(self) -> None:
        self.created: List[str] = []

    def _admin(self, statement: str) -> None:
        db = open_database(SERVER_URLS[self.backend])
        with db.connection_context():
            db.execute_sql(statement)

    def create(self) -> str:
        name = PREFIX + secrets.token_hex(6)
        if self.backend == "mysql":
            self._admin(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        else:
            self._admin(f"CREATE DATABASE {name}")
        self.created.append(name)
        return with_database_name(SERVER_URLS[self.backend], name)

    def drop_all(self) -> None:
        while self.created:
            name = self.created.pop()
            assert name.startswith(PREFIX)
            if self.backend == "postgres":
                self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            else:
                self._admin(f"DROP DATABASE IF EXISTS {name}")


def clear_tables(db: peewee.Database) -> None:
    for table in ("caravel_jobs", "caravel_outbox", "caravel_failures",
                  "caravel_paused_queues", "caravel_workers", "caravel_slots",
                  "caravel_workflows", "caravel_workflow_jobs"):
        db.execute_sql(f"DELETE FROM {table}")


Connector = Callable[[], peewee.Database]
