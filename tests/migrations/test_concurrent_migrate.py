"""Concurrent ``migrate`` (issue #11 item 9): two processes migrating one empty database
at once take turns under the database's migration lock (PostgreSQL advisory lock,
MariaDB GET_LOCK, SQLite BEGIN IMMEDIATE). One applies every script, the other waits,
then finds nothing pending; each script is recorded once."""
from __future__ import annotations

import time
from typing import Any

import pytest

from caravel_lite import check_schema, migrate, open_database
from caravel_lite.errors import SchemaLockTimeout
from caravel_lite.migrator import pending_migrations
from caravel_lite.schema import HISTORY_TABLE
from tests.contract import procs

STEP_PAUSE = 0.3  # seconds each script waits before it runs: the runs overlap for sure


def _slow_scripts() -> None:
    """Make every script pause before it runs, so that both processes have read their
    plan (everything pending) before either applies anything, were it not for the
    lock."""
    from playhouse.migrations import Runner

    run = Runner._run

    def paused(self: Any, *args: Any, **kwargs: Any) -> Any:
        time.sleep(STEP_PAUSE)
        return run(self, *args, **kwargs)

    Runner._run = paused


def _migrate_child(url: str, barrier: Any, results: Any) -> None:
    _slow_scripts()
    db = open_database(url)
    try:
        db.connect()
        barrier.wait(timeout=60)
        started = time.monotonic()
        applied = migrate(db)
        results.put((applied, time.monotonic() - started))
    finally:
        db.close()


def test_two_processes_migrating_at_once_apply_each_script_once(new_database):
    url = new_database()
    db = open_database(url)
    with db.connection_context():
        every = pending_migrations(db)
    outcomes = procs.in_processes(2, _migrate_child, url)
    applied = sorted((names for names, _ in outcomes), key=len)
    assert applied == [[], every]
    waiter_seconds = min(outcomes, key=lambda outcome: len(outcome[0]))[1]
    # the one that applied nothing waited for the other's whole run
    assert waiter_seconds >= STEP_PAUSE * len(every) * 0.9
    with db.connection_context():
        check_schema(db)
        names = [row[0] for row in db.execute_sql(f"SELECT name FROM {HISTORY_TABLE}")]
        assert sorted(names) == sorted(every)


def test_a_waiter_gives_up_after_lock_timeout_and_applies_nothing(new_database, backend):
    url = new_database()
    holder, waiter = open_database(url), open_database(url)
    holder.connect()
    waiter.connect()
    try:
        with _held(holder):
            with pytest.raises(SchemaLockTimeout):
                migrate(waiter, lock_timeout=0.3)
        assert pending_migrations(waiter)  # nothing was applied
        assert migrate(waiter)  # the lock is free again
    finally:
        holder.close()
        waiter.close()


def _held(db):
    from caravel_lite.dialect import dialect_of

    return dialect_of(db).migration_lock(db, 10)
