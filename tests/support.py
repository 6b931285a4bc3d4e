"""Small helpers for tests: waiting on conditions (never bare sleeps), job types, and
cutting a server database's other sessions (an outage as its clients see it)."""
from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.01,
             message: str = "condition") -> T:
    """Poll ``condition`` until it returns a truthy value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def kill_other_connections(db, backend: str) -> int:
    """Terminate every other session on ``db``'s database (PostgreSQL or MariaDB);
    return how many there were."""
    if backend == "postgres":
        rows = db.execute_sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
        return len(rows)
    ids = [row[0] for row in db.execute_sql(
        "SELECT ID FROM information_schema.PROCESSLIST "
        "WHERE DB = DATABASE() AND ID <> CONNECTION_ID()").fetchall()]
    for ident in ids:
        db.execute_sql(f"KILL CONNECTION {int(ident)}")
    return len(ids)
