"""Deploys lose no work (every database): a handler that returns during a stop is
completed; claimed but unstarted jobs are handed back with their attempt; the shutdown
timeout bounds the wait for handlers that ignore cancellation."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import List

import pytest

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, JobState, QueueWorker
from caravel_lite.worker import handle_signals

from tests.support import wait_for
from tests.worker.helpers import QUEUE, WorkerThread, enqueue, options, status


@dataclass(frozen=True)
class Step:
    n: int


def test_a_handler_that_returns_during_a_stop_is_completed(db, connect, caplog):
    registry = JobRegistry()
    started = threading.Event()
    finished: List[int] = []

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        started.set()
        ctx.cancelled.wait(10)  # told to stop: finishes its (short) work and returns
        finished.append(job.n)

    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(1))
    stop = threading.Event()
    caplog.set_level(logging.INFO, logger="caravel_lite")
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, options(lease=30))),
                           stop).start()
    assert started.wait(10)
    stop.set()
    running.join()
    assert finished == [1]
    found = status(queue, job_id)
    assert (found.state, found.attempts) == (JobState.COMPLETED, 1)
    assert any("returned while the worker was stopping" in r.getMessage()
               for r in caplog.records)


def test_two_graceful_stops_with_prefetch_use_no_attempt_of_an_unstarted_job(db, connect):
    registry = JobRegistry()
    started = threading.Event()
    ran: List[int] = []

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        ran.append(job.n)
        started.set()
        ctx.cancelled.wait(0.2)  # the first job of each worker is running at its stop

    opts = options(lease=30, max_attempts=2)
    queue = DatabaseQueue(db, registry, opts)
    ids = [enqueue(queue, Step(n)) for n in range(5)]
    for _ in range(2):  # two deploys, each stopping a worker that leased all it could
        started.clear()
        stop = threading.Event()
        worker = QueueWorker(DatabaseQueue(connect(), registry, opts), prefetch=5)
        running = WorkerThread(worker, stop).start()
        assert started.wait(10)
        stop.set()
        running.join()
    assert len(ran) == 2
    for job_id in ids:
        found = status(queue, job_id)
        if found.state is JobState.COMPLETED:
            assert found.attempts == 1
        else:  # never started: handed back twice, no attempt used
            assert (found.state, found.attempts) == (JobState.PENDING, 0)
    assert queue.counts(QUEUE).completed == 2
    worker = QueueWorker(queue)
    while worker.run_once(QUEUE):
        pass
    assert [status(queue, job_id).state for job_id in ids] == [JobState.COMPLETED] * 5
    assert sorted(status(queue, job_id).attempts for job_id in ids) == [1] * 5


def test_the_shutdown_timeout_bounds_the_wait_for_a_handler_that_ignores_it(db, connect):
    registry = JobRegistry()
    started = threading.Event()
    ended = threading.Event()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        started.set()
        time.sleep(3)  # ignores ctx.cancelled
        ended.set()

    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(1))
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         shutdown_timeout=0.2)
    running = WorkerThread(worker, stop).start()
    assert started.wait(10)
    stop.set()
    stopped_at = time.monotonic()
    running.join()
    assert time.monotonic() - stopped_at < 2.5  # the handler still had seconds to go
    assert not ended.is_set()
    found = status(queue, job_id)
    assert (found.state, found.attempts) == (JobState.LEASED, 1)  # left for its lease
    assert ended.wait(10)


def test_an_async_handler_cancelled_by_shutdown_leaves_its_job_leased(db, connect):
    registry = JobRegistry()
    started = threading.Event()
    cancelled: List[bool] = []

    @registry.job("tests.step.v1", Step)
    async def handle(job: Step, ctx: JobContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(ctx.cancelled.is_set())
            raise

    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(1))
    stop = threading.Event()
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                                       concurrency=4), stop).start()
    assert started.wait(10)
    stop.set()
    running.join()
    assert cancelled == [True]
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)


def test_a_job_claimed_for_a_free_slot_but_not_started_at_stop_is_released(db, connect):
    """Stop lands between the claim and the handler's start: released, not run."""
    registry = JobRegistry()
    ran: List[int] = []
    registry.register("tests.step.v1", Step, lambda job, ctx: ran.append(job.n))
    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(1))
    stop = threading.Event()
    stop.set()
    worker = QueueWorker(queue)
    assert worker.run_once(QUEUE, stop=stop) is True
    assert ran == []
    found = status(queue, job_id)
    assert (found.state, found.attempts) == (JobState.PENDING, 0)
    wait_for(lambda: worker.run_once(QUEUE), message="the job again")
    assert ran == [1] and status(queue, job_id).attempts == 1


def test_a_second_sigint_ends_a_stopping_worker_at_once(db, connect):
    """The first SIGINT starts a graceful stop (30 s allowed here); the second raises
    KeyboardInterrupt at once, even though a handler ignores cancellation; the worker
    still hands back its unstarted jobs on the way out."""
    registry = JobRegistry()
    started = threading.Event()
    registry.register("tests.step.v1", Step,
                      lambda job, ctx: (started.set(), time.sleep(8)))
    queue = DatabaseQueue(db, registry, options(lease=30))
    ids = [enqueue(queue, Step(n)) for n in range(3)]
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)), prefetch=3,
                         shutdown_timeout=30)
    stop = threading.Event()

    def interrupt_twice() -> None:
        assert started.wait(10)
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.wait(10)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_twice, daemon=True).start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with handle_signals(stop):
            worker.run(QUEUE, stop=stop)  # in the main thread, where signals arrive
    assert time.monotonic() - began < 6  # not after the handler's 8 s, nor the 30 s
    worker.queue.db.close()
    states = sorted((status(queue, i).state.value, status(queue, i).attempts) for i in ids)
    assert states == [("leased", 1), ("pending", 0), ("pending", 0)]
