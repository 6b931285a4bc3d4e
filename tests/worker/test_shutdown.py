"""run(): the sequential loop, prompt idle stop, and shutdown in the middle of a job."""
from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import List

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, JobState, QueueWorker
from caravel_lite.worker import handle_signals

from tests.support import wait_for
from tests.worker.helpers import QUEUE, WorkerThread, counting, enqueue, options, status


@dataclass(frozen=True)
class Step:
    number: int


def test_run_drains_the_queue_then_stops_cleanly(db, connect):
    registry = JobRegistry()
    done: List[int] = []
    registry.register("tests.step.v1", Step, lambda job, ctx: done.append(job.number))
    queue = DatabaseQueue(db, registry, options())
    for number in range(3):
        enqueue(queue, Step(number))
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options()), poll_interval=0.1)
    running = WorkerThread(worker, stop).start()
    wait_for(lambda: len(done) == 3, message="three jobs")
    stop.set()
    running.join()
    assert sorted(done) == [0, 1, 2]
    assert queue.counts(QUEUE).completed == 3


def test_an_idle_worker_stops_promptly(db, connect):
    claims = counting(DatabaseQueue, "claim_batch")(connect(), JobRegistry(), options())
    stop = threading.Event()
    running = WorkerThread(QueueWorker(claims, poll_interval=5), stop).start()
    wait_for(lambda: claims.calls >= 1, message="a first claim")
    started = time.monotonic()
    stop.set()
    running.join(timeout=5)
    assert time.monotonic() - started < 2.5  # far below the 5 s poll interval
    assert claims.calls == 1


def test_stop_mid_handler_leaves_the_job_leased_for_another_worker(db, connect):
    registry = JobRegistry()
    started = threading.Event()
    attempts: List[int] = []
    cancelled: List[bool] = []

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            started.set()
            cancelled.append(ctx.cancelled.wait(10))
            ctx.raise_if_cancelled()  # told to stop: ends without finishing

    opts = options(lease=1)
    queue = DatabaseQueue(db, registry, opts)
    job_id = enqueue(queue, Step(1))
    stop = threading.Event()
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, opts),
                                       poll_interval=0.1), stop).start()
    assert started.wait(10)
    stop.set()
    running.join()
    assert cancelled == [True]
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)

    second = QueueWorker(queue)
    wait_for(lambda: second.run_once(QUEUE), message="the lease to expire")
    found = status(queue, job_id)
    assert (found.state, found.attempts) == (JobState.COMPLETED, 2)
    assert attempts == [1, 2]


def test_handle_signals_sets_stop_and_restores_the_previous_handlers():
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    stop = threading.Event()
    with handle_signals(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_job_that_returns_during_a_stop_is_completed_while_others_still_run(db, connect):
    """The stop waits for a handler that ignores it; one that returns meanwhile is
    acknowledged then, not once the wait is over (an interrupt that ends the wait, a
    second Ctrl+C, would otherwise meet its completion in the write it cuts short)."""
    registry = JobRegistry()
    both_started = threading.Barrier(3)
    release_quick, release_slow = threading.Event(), threading.Event()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        both_started.wait(10)
        (release_quick if job.number == 0 else release_slow).wait(10)

    queue = DatabaseQueue(db, registry, options(lease=30))
    quick, slow = enqueue(queue, Step(0)), enqueue(queue, Step(1))
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         concurrency=2, poll_interval=0.1, shutdown_timeout=20)
    running = WorkerThread(worker, stop).start()
    try:
        both_started.wait(10)
        stop.set()
        release_quick.set()
        wait_for(lambda: status(queue, quick).state is JobState.COMPLETED, timeout=5,
                 message="the job that returned during the stop, completed")
        assert status(queue, slow).state is JobState.LEASED  # still running
    finally:
        release_slow.set()
        running.join(timeout=20)
    assert status(queue, slow).state is JobState.COMPLETED
