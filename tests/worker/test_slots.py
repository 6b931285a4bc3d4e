"""A pool thread whose job finished goes on with the next waiting job itself, without
a hand-off through the worker's loop (every database). What the loop would have done
still holds: a stop starts nothing more, a waiting job that cannot run is settled by the
loop, the jobs run in claim order, never more at once than the concurrency, and every
completion is written."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import List

from caravel_lite import DatabaseQueue, Dispatch, Failure, JobContext, JobRegistry, JobState
from caravel_lite import Priority, QueueWorker

from tests.support import wait_for
from tests.worker.helpers import QUEUE, TENANT, WorkerThread, enqueue, options, status


@dataclass(frozen=True)
class Step:
    n: int


def test_a_stop_set_by_a_running_job_starts_none_of_the_waiting_ones(db, connect):
    registry = JobRegistry()
    ran: List[int] = []
    stop = threading.Event()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        ran.append(job.n)
        if job.n == 3:
            stop.set()  # the deploy's signal arrives while job 3 runs

    queue = DatabaseQueue(db, registry, options(lease=30))
    ids = [enqueue(queue, Step(n)) for n in range(12)]
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)), prefetch=12)
    WorkerThread(worker, stop).start().join()
    assert ran == [0, 1, 2, 3]
    for n, job_id in enumerate(ids):
        found = status(queue, job_id)
        if n <= 3:
            assert (found.state, found.attempts) == (JobState.COMPLETED, 1)
        else:  # claimed, never started: handed back with the attempt unused
            assert (found.state, found.attempts) == (JobState.PENDING, 0)


def test_a_waiting_job_that_cannot_run_is_settled_and_the_rest_go_on_in_order(db, connect,
                                                                              caplog):
    registry = JobRegistry()
    ran: List[int] = []

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        ran.append(job.n)

    queue = DatabaseQueue(db, registry, options(lease=30))
    ids = [enqueue(queue, Step(n)) for n in range(4)]
    # A job of a wire name this worker's registry does not know, claimed between them.
    other = JobRegistry()
    other.register("tests.unknown.v1", Step, lambda job, ctx: None)
    stranger = DatabaseQueue(db, other, options(lease=30, max_attempts=1)).enqueue(
        Step(99), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
    ids += [enqueue(queue, Step(n)) for n in range(4, 8)]
    stop = threading.Event()
    caplog.set_level(logging.WARNING, logger="caravel_lite")
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)), prefetch=9)
    running = WorkerThread(worker, stop).start()
    wait_for(lambda: status(queue, ids[-1]).state is JobState.COMPLETED, timeout=10)
    stop.set()
    running.join()
    assert ran == list(range(8))  # claim order, the stranger skipped
    assert all(status(queue, job_id).state is JobState.COMPLETED for job_id in ids)
    failed = status(queue, stranger)
    assert (failed.state, failed.last_failure) == (JobState.DEAD_LETTER,
                                                    Failure.UNKNOWN_JOB_TYPE)
    # Reported once, by the loop that settled it (the pool thread only looked).
    assert [r.getMessage() for r in caplog.records
            if "is not registered here" in r.getMessage()] == [
        f"job {stranger} on queue {QUEUE}: wire name tests.unknown.v1 is not registered here"]


def test_slots_going_on_by_themselves_never_exceed_the_concurrency(db, connect):
    registry = JobRegistry()
    lock = threading.Lock()
    running_now = [0]
    most = [0]
    ran: List[int] = []

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        with lock:
            running_now[0] += 1
            most[0] = max(most[0], running_now[0])
        time.sleep(0.002)  # long enough for the slots to overlap, short enough to chain
        with lock:
            running_now[0] -= 1
            ran.append(job.n)

    queue = DatabaseQueue(db, registry, options(lease=30))
    for n in range(120):
        queue.enqueue(Step(n), Dispatch(queue=QUEUE, tenant_id=TENANT,
                                        priority=Priority.NORMAL))
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         concurrency=3)
    running = WorkerThread(worker, stop).start()
    wait_for(lambda: queue.counts(QUEUE).completed == 120, timeout=30)
    stop.set()
    running.join()
    assert sorted(ran) == list(range(120))
    assert 2 <= most[0] <= 3


def test_a_job_queued_behind_a_long_handler_is_handed_back_before_its_lease_runs_out(
        db, connect):
    """A job handed to a slot behind a handler that outlives its lease is taken back by
    the loop once its lease is too old to start, attempt unused (it sat there, neither
    started nor handed back, until its lease expired and its attempt was spent)."""
    registry = JobRegistry()
    slow_started = threading.Event()
    LONG, LAST = 30, 31

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        if job.n == LONG:
            slow_started.set()
            ctx.cancelled.wait(10)  # until its deadline

    opts = options(lease=2.0, renew=None)
    queue = DatabaseQueue(db, registry, opts)
    ids = [enqueue(queue, Step(n)) for n in range(LAST + 1)]
    stop = threading.Event()
    # One claim takes them all; once the first short job has ended, the slot is handed
    # the rest as one run, the last behind the long one.
    worker = QueueWorker(DatabaseQueue(connect(), registry, opts), prefetch=LAST + 1)
    running = WorkerThread(worker, stop).start()
    try:
        assert slow_started.wait(10)
        wait_for(lambda: status(queue, ids[LAST]).state is JobState.COMPLETED, timeout=15,
                 message="the job queued behind the long one to be completed")
    finally:
        stop.set()
        running.join(20)
    assert status(queue, ids[LAST]).attempts == 1  # handed back unused, then run once
