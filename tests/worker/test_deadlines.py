"""Deadlines never wait on the database (every database): while a renewal is stuck on a
lock another connection holds, the handler is still told to stop at its lease deadline.
The thread that enforces deadlines does no database work, and a renewal is bounded on
the client by what its lease has left, so one stuck renewal does not cost the other
jobs their leases."""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Dict, List

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


def _stuck_job_and_worker(db, connect, registry, opts):
    """The "stuck" job enqueued, a connection to lock its row with, and a worker of
    concurrency 2 running on a thread: (queue, job id, intruder, stop, worker thread)."""
    queue = DatabaseQueue(db, registry, opts)
    stuck = enqueue(queue, Work("stuck"))
    intruder = connect()
    intruder.connect()
    stop = threading.Event()
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, opts),
                                       concurrency=2), stop).start()
    return queue, stuck, intruder, stop, running


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
        # Stopped: raising leaves the job leased, so the stop writes nothing for it (a
        # completion would wait for the same row lock as the renewal).
        raise RuntimeError("stopped")

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


@pytest.mark.backends("postgres", "mysql")  # SQLite's one write lock stops the 2nd claim
def test_a_renewal_stuck_on_one_job_gives_up_in_time_for_the_others(db, connect, backend):
    """A renewal is bounded on the client by what its lease has left: one stuck on a
    locked row fails before that lease's deadline, and the renewer goes on to renew the
    other jobs' leases (unbounded, it waited for the lock and every other job lost its
    lease with it)."""
    registry = JobRegistry()
    started: Dict[str, threading.Event] = {"stuck": threading.Event(),
                                            "other": threading.Event()}
    cancelled: Dict[tuple, bool] = {}  # (label, attempt) -> told to stop

    @registry.job("tests.work.v1", Work)
    def handle(job: Work, ctx: JobContext) -> None:
        started[job.label].set()
        # The stuck job waits to be cancelled; the other outlives its first lease twice.
        cancelled[job.label, ctx.attempt] = ctx.cancelled.wait(
            LEASE + 8 if job.label == "stuck" else 2 * LEASE)

    opts = options(lease=LEASE, renew=0.3)
    queue, stuck, intruder, stop, running = _stuck_job_and_worker(db, connect, registry,
                                                                  opts)
    try:
        assert started["stuck"].wait(10)
        _lock_row(intruder, backend, str(stuck))
        time.sleep(0.4)  # the stuck job's renewal (every 0.3 s) now waits for the lock
        other = enqueue(queue, Work("other"))
        assert started["other"].wait(10)
        # The lock is held past the other job's first lease: only a renewal of it made
        # while the stuck one still waits keeps that job. (The loop's sweep of the stuck
        # job's expired lease waits for the lock too, until it is let go here.)
        time.sleep(LEASE + 0.5)
        intruder.rollback()
        wait_for(lambda: ("other", 1) in cancelled, timeout=3 * LEASE + 5,
                 message="the other job's handler to return")
        wait_for(lambda: status(queue, other).state is JobState.COMPLETED, timeout=10,
                 message="the other job to be completed")
    finally:
        intruder.rollback()
        intruder.close()
        stop.set()
        running.join(20)
    assert cancelled["other", 1] is False, "the other job lost its lease to a stuck renewal"
    assert status(queue, other).attempts == 1
    assert cancelled.get(("stuck", 1)) is True


@pytest.mark.backends("postgres", "mysql")  # SQLite's one write lock stops the other job
def test_an_async_job_ending_during_its_stuck_renewal_does_not_freeze_the_event_loop(
        db, connect, backend):
    """The end of an async job never waits for a renewal of it in flight: the event
    loop it ends on runs every other async job (it waited on the renewal, so one lease
    renewal stuck on the database froze every async handler of the worker)."""
    registry = JobRegistry()
    started = {"stuck": threading.Event(), "ticker": threading.Event()}
    end_stuck = threading.Event()
    ticks: List[float] = []

    @registry.job("tests.work.v1", Work)
    async def handle(job: Work, ctx: JobContext) -> None:
        started[job.label].set()
        if job.label == "stuck":
            while not end_stuck.is_set():
                await asyncio.sleep(0.01)
            return
        while not ctx.cancelled.is_set() and len(ticks) < 400:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    opts = options(lease=6.0, renew=0.3)
    queue, stuck, intruder, stop, running = _stuck_job_and_worker(db, connect, registry,
                                                                  opts)
    try:
        assert started["stuck"].wait(10)
        _lock_row(intruder, backend, str(stuck))
        enqueue(queue, Work("ticker"))
        assert started["ticker"].wait(10)
        time.sleep(0.8)  # the stuck job's renewal (every 0.3 s) now waits for the lock
        ended = time.monotonic()
        end_stuck.set()  # it returns while its renewal is still in flight
        wait_for(lambda: ticks and ticks[-1] > ended + 1.5, timeout=10,
                 message="the other async job to go on ticking")
    finally:
        intruder.rollback()
        intruder.close()
        stop.set()
        running.join(20)
    after = [t for t in ticks if t >= ended - 0.1]
    gaps = [b - a for a, b in zip(after, after[1:])]
    assert max(gaps) < 0.5, f"the event loop stood still for {max(gaps):.2f} s"
