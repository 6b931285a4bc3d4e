"""One retry budget per call (issue #11 item 1). With the jobs table write-locked by
another connection, claim, renew, complete, fail and enqueue each repeat their
statement at most ``busy_retries`` times in all, whichever layer repeats it (SQLite's
busy handling and the queue's retry of a fenced statement share one budget), block no
longer than the policy's worst case, then raise DatabaseBusy and change nothing.
``busy_retries=0`` means no repeat at all."""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Dict, Iterator

import peewee
import pytest

from caravel_lite import Failure, open_database
from caravel_lite.errors import DatabaseBusy
from caravel_lite.retry import policy_of, transient_retries
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue, row_count

# How long one statement of the locked-out connection waits for the lock (seconds), and
# how it is told to: SQLite's busy_timeout, PostgreSQL's lock_timeout, MariaDB's
# lock_wait_timeout (whole seconds; LOCK TABLES takes a metadata lock).
LOCK_WAIT = {"sqlite": 0.005, "postgres": 0.1, "mysql": 1.0}
SESSION = {"postgres": "SET lock_timeout = '100ms'",
           "mysql": "SET SESSION lock_wait_timeout = 1"}
# Locks that let others read the jobs table but not write it.
HOLD = {"sqlite": ["BEGIN IMMEDIATE"],
        "postgres": ["BEGIN", "LOCK TABLE caravel_jobs IN SHARE ROW EXCLUSIVE MODE"],
        "mysql": ["LOCK TABLES caravel_jobs READ"]}
RELEASE = {"sqlite": "ROLLBACK", "postgres": "ROLLBACK", "mysql": "UNLOCK TABLES"}
SLACK = 3.0  # seconds of scheduling noise on a shared machine


def _open(backend: str, url: str, **extra) -> peewee.Database:
    if backend == "sqlite":
        extra.update(pragmas={"journal_mode": "wal", "busy_timeout": 5}, timeout=0.005)
    db = open_database(url, **extra)
    db.connect()
    if backend in SESSION:
        db.execute_sql(SESSION[backend])
    return db


@contextlib.contextmanager
def _write_lock(backend: str, url: str) -> Iterator[None]:
    holder = open_database(url)
    holder.connect()
    try:
        for statement in HOLD[backend]:
            holder.execute_sql(statement)
        yield
    finally:
        holder.execute_sql(RELEASE[backend])
        holder.close()


OPERATIONS: Dict[str, Callable] = {
    "claim": lambda queue, lease: queue.claim(QUEUE),
    "renew": lambda queue, lease: queue.renew(lease),
    "complete": lambda queue, lease: queue.complete(lease),
    "fail": lambda queue, lease: queue.fail(lease, Failure.HANDLER_FAILED),
    "enqueue": lambda queue, lease: queue.enqueue(Ping(9), dispatch()),
}


@pytest.mark.parametrize("retries", [0, 3])
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_locked_table_spends_one_budget_then_raises_database_busy(
        db, db_url, backend, operation, retries):
    setup = make_queue(db)
    leased = setup.enqueue(Ping(1), dispatch()).job_id
    setup.enqueue(Ping(2), dispatch())  # due: something for the claim to take
    queue_db = _open(backend, db_url, busy_retries=retries)
    queue = make_queue(queue_db)
    lease = queue.claim(QUEUE)
    assert lease is not None and lease.job_id == leased
    policy = policy_of(queue_db)
    assert policy.retries == retries
    try:
        with _write_lock(backend, db_url):
            before = transient_retries.value
            started = time.monotonic()
            with pytest.raises(DatabaseBusy) as caught:
                OPERATIONS[operation](queue, lease)
            blocked = time.monotonic() - started
            spent = transient_retries.value - before
        assert isinstance(caught.value, peewee.OperationalError)
        if retries == 0:
            assert spent == 0, f"{spent} repeats with busy_retries=0"
            assert blocked <= LOCK_WAIT[backend] + SLACK
        else:
            assert 0 < spent <= retries
            assert blocked <= policy.worst_case(LOCK_WAIT[backend]) + SLACK
        assert "may be repeated" in str(caught.value)
        # nothing changed: the lease is still owned and no job was added
        assert row_count(db) == 2
        assert setup.status(leased, QUEUE, TENANT).attempts == 1
        assert queue.complete(lease)
    finally:
        queue_db.close()
