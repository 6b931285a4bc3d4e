"""Timeouts (issue 24), every database: at a job's timeout its handler is cancelled and
the attempt fails with TIMED_OUT, retried and dead-lettered like any failure, whatever
the lease renewal does; a sync handler that ignores the cancellation is abandoned and
its slot freed; an async one is cancelled for real."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from datetime import timedelta

import pytest

from caravel_lite import DatabaseQueue, Dispatch, Failure, JobContext, JobRegistry, JobState
from caravel_lite import QueueWorker
from caravel_lite.worker import timeouts

from tests.support import wait_for
from tests.worker.helpers import QUEUE, TENANT, WorkerThread, options, status

TIMEOUT = timedelta(milliseconds=300)


@dataclass(frozen=True)
class Slow:
    n: int


def test_a_cooperative_sync_handler_times_out_and_is_retried_then_dead_lettered(db):
    registry = JobRegistry()
    seen = []

    @registry.job("timeouts.sync.v1", Slow, queue=QUEUE, timeout=TIMEOUT, max_attempts=2,
                  retry_delay=timedelta(milliseconds=1))
    def handle(job: Slow, ctx: JobContext) -> None:
        # Lease renewal keeps the lease alive far longer than the timeout.
        assert ctx.cancelled.wait(10), "never cancelled"
        seen.append(ctx.attempt)
        ctx.raise_if_cancelled()

    queue = DatabaseQueue(db, registry, options(lease=1.0, renew=0.2))
    job_id = queue.enqueue(Slow(1), Dispatch(tenant_id=TENANT)).job_id
    worker = QueueWorker(queue)
    assert worker.run_once(QUEUE)
    found = status(queue, job_id)
    assert (found.state, found.last_failure, found.attempts) == (
        JobState.PENDING, Failure.TIMED_OUT, 1)
    wait_for(lambda: worker.run_once(QUEUE), message="the retry")
    found = status(queue, job_id)
    assert (found.state, found.last_failure) == (JobState.DEAD_LETTER, Failure.TIMED_OUT)
    assert seen == [1, 2]


def test_a_sync_handler_ignoring_its_timeout_is_abandoned_and_its_slot_freed(
        db, connect, monkeypatch):
    monkeypatch.setattr(timeouts, "GRACE", 0.2)
    registry = JobRegistry()
    stuck = threading.Event()
    ran = []

    @registry.job("timeouts.stuck.v1", Slow, queue=QUEUE, timeout=TIMEOUT, max_attempts=1)
    def handle(job: Slow, ctx: JobContext) -> None:
        ran.append(job.n)
        if job.n == 1:
            stuck.wait(30)  # ignores ctx.cancelled

    queue = DatabaseQueue(db, registry, options(lease=5.0))
    first = queue.enqueue(Slow(1), Dispatch(tenant_id=TENANT)).job_id
    second = queue.enqueue(Slow(2), Dispatch(tenant_id=TENANT)).job_id
    stop = threading.Event()
    runner = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, options(lease=5.0)),
                                      concurrency=1), stop)
    runner.thread.start()
    try:
        # One slot: the second job runs only once the first one's slot is freed, while
        # its handler is still stuck (well within the 5 s lease).
        wait_for(lambda: status(queue, second).state is JobState.COMPLETED, timeout=4,
                 message="the second job, in the freed slot")
        assert not stuck.is_set() and ran == [1, 2]
        found = status(queue, first)
        assert (found.state, found.last_failure) == (JobState.DEAD_LETTER, Failure.TIMED_OUT)
    finally:
        stuck.set()
        stop.set()
        runner.thread.join(10)
    assert not runner.errors


def test_a_handler_whose_lease_ran_out_first_is_still_abandoned_at_its_timeout(
        db, monkeypatch):
    """The lease deadline cancels the handler before its timeout (no renewal); one that
    ignores that is still abandoned once its timeout passes, not held until it returns."""
    monkeypatch.setattr(timeouts, "GRACE", 0.2)
    registry = JobRegistry()
    stuck = threading.Event()

    @registry.job("timeouts.outlived.v1", Slow, queue=QUEUE, max_attempts=1,
                  timeout=timedelta(seconds=1.5))
    def handle(job: Slow, ctx: JobContext) -> None:
        stuck.wait(30)  # ignores ctx.cancelled

    queue = DatabaseQueue(db, registry, options(lease=1.0))
    queue.enqueue(Slow(5), Dispatch(tenant_id=TENANT))
    ended = threading.Event()
    thread = threading.Thread(target=lambda: (QueueWorker(queue).run_once(QUEUE),
                                              ended.set()))
    thread.start()
    try:
        assert ended.wait(10), "the slot was held until the handler returned"
        assert not stuck.is_set()
    finally:
        stuck.set()
        thread.join(10)


def test_an_async_handler_is_cancelled_at_its_timeout(db):
    registry = JobRegistry()
    cancelled = []

    @registry.job("timeouts.async.v1", Slow, queue=QUEUE, max_attempts=1)
    async def handle(job: Slow, ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(job.n)
            raise

    queue = DatabaseQueue(db, registry, options(lease=5.0))
    # The call's timeout: the type sets none.
    job_id = queue.enqueue(Slow(3), Dispatch(tenant_id=TENANT, timeout=TIMEOUT)).job_id
    plain = queue.enqueue(Slow(4), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
    worker = QueueWorker(queue)
    assert worker.run_once(QUEUE)
    assert cancelled == [3]
    found = status(queue, job_id)
    assert (found.state, found.last_failure) == (JobState.DEAD_LETTER, Failure.TIMED_OUT)
    assert status(queue, plain).state is JobState.PENDING  # no timeout: not run yet


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handler_done_before_its_timeout_completes(db, kind):
    registry = JobRegistry()
    if kind == "sync":
        registry.register("timeouts.quick.v1", Slow, lambda job, ctx: None, queue=QUEUE,
                          timeout=timedelta(seconds=5))
    else:
        async def quick(job: Slow, ctx: JobContext) -> None:
            await asyncio.sleep(0)
        registry.register("timeouts.quick.v1", Slow, quick, queue=QUEUE,
                          timeout=timedelta(seconds=5))
    queue = DatabaseQueue(db, registry, options())
    job_id = queue.enqueue(Slow(1), Dispatch(tenant_id=TENANT)).job_id
    assert QueueWorker(queue).run_once(QUEUE)
    assert status(queue, job_id).state is JobState.COMPLETED
