"""Deadlines never wait on the database (every database): while a renewal is stuck on a
lock another connection holds, the handler is still told to stop at its lease deadline.
The thread that enforces deadlines does no database work; the renewer's statement may
block as long as the database lets it."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Dict

import pytest

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, JobState, QueueWorker

from tests.support import wait_for
from tests.worker.helpers import QUEUE, WorkerThread, enqueue, options, status

LEASE = 2.0


@dataclass(frozen=True)
class Work:
    label: str


def _lock_row(intruder, backend: str, job_id: str) -> None:
    """Hold a lock that a renewal of ``job_id`` must wait for, until rollback."""
    if backend == "sqlite":
        intruder.execute_sql("BEGIN IMMEDIATE")  # the database's one write lock
    else:
        intruder.execute_sql("BEGIN")
        intruder.execute_sql(f"SELECT id FROM caravel_jobs WHERE id = {intruder.param} "
                             "FOR UPDATE", (job_id,))


def test_a_stuck_renewal_does_not_hold_back_the_deadline(db, connect, backend, caplog):
    registry = JobRegistry()
    seen: Dict[str, float] = {}
    started = threading.Event()

    @registry.job("tests.work.v1", Work)
    def handle(job: Work, ctx: JobContext) -> None:
        seen["started"] = time.monotonic()
        started.set()
        if ctx.cancelled.wait(LEASE + 8):
            seen["cancelled"] = time.monotonic()
        seen["returned"] = time.monotonic()

    caplog.set_level(logging.INFO, logger="caravel_lite")
    opts = options(lease=LEASE, renew=0.3)
    queue = DatabaseQueue(db, registry, opts)
    job_id = enqueue(queue, Work("stuck"))
    intruder = connect()
    intruder.connect()
    stop = threading.Event()
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, opts)), stop).start()
    try:
        assert started.wait(10)
        # Locked before the first renewal (0.3 s in): every renewal now waits for it.
        _lock_row(intruder, backend, str(job_id))
        wait_for(lambda: "returned" in seen, timeout=LEASE + 10,
                 message="the handler to return")
        # Its outcome (nothing written: the lease was lost) reaches the loop while the
        # renewal is still stuck: the handler's thread does not wait for it.
        wait_for(lambda: any(str(job_id) in r.getMessage() and "not acknowledged" in
                             r.getMessage() for r in caplog.records), timeout=5,
                 message="the job's outcome, with the renewal still stuck")
    finally:
        intruder.rollback()
        intruder.close()
        stop.set()
        running.join(20)
    assert "cancelled" in seen, "never told to stop while its renewal was stuck"
    # Cancelled at the deadline (the claim's lease, never renewed), give or take a tick.
    assert seen["cancelled"] - seen["started"] < LEASE + 1.0, seen
    # Never acknowledged as completed: its lease was lost (the worker may have taken
    # it again once it expired, and handed it back at the stop).
    assert status(queue, job_id).state in (JobState.LEASED, JobState.PENDING)


@pytest.mark.backends("postgres", "mysql")  # SQLite's one write lock stops every write
def test_a_stop_does_not_wait_for_a_stuck_renewal(db, connect, backend):
    registry = JobRegistry()
    started = threading.Event()

    @registry.job("tests.work.v1", Work)
    def handle(job: Work, ctx: JobContext) -> None:
        started.set()
        ctx.cancelled.wait(30)

    opts = options(lease=30, renew=0.2)
    queue = DatabaseQueue(db, registry, opts)
    job_id = enqueue(queue, Work("stuck"))
    intruder = connect()
    intruder.connect()
    stop = threading.Event()
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, opts),
                                       shutdown_timeout=0.5), stop).start()
    try:
        assert started.wait(10)
        _lock_row(intruder, backend, str(job_id))
        time.sleep(0.5)  # the renewals (every 0.2 s) now wait for the lock
        stop.set()
        began = time.monotonic()
        running.join(20)
        took = time.monotonic() - began
    finally:
        intruder.rollback()
        intruder.close()
    # The shutdown timeout, then at most a short wait for the renewer: not the lock.
    assert took < 5, took
