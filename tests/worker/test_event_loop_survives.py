"""The worker's event loop outlives a handler's task that lets a SystemExit or
KeyboardInterrupt out (asyncio re-raises those from the task's step, out of the loop's
run_forever, wherever the task was made): the job that made it fails, and every async
job after it still runs (every database)."""
from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import List

import pytest

from caravel_lite import DatabaseQueue, Failure, JobContext, JobRegistry, JobState, QueueWorker

from tests.support import wait_for
from tests.worker.helpers import QUEUE, WorkerThread, enqueue, options, status


@dataclass(frozen=True)
class Step:
    n: int


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
def test_an_inner_task_raising_an_interrupt_leaves_the_event_loop_running(
        db, connect, raised):
    registry = JobRegistry()
    ran: List[int] = []

    async def child() -> None:
        raise raised(4)

    @registry.job("tests.step.v1", Step)
    async def handle(job: Step, ctx: JobContext) -> None:
        ran.append(job.n)
        if job.n == 0:
            await asyncio.gather(child())  # a task of its own, not the handler's

    queue = DatabaseQueue(db, registry, options(lease=30, max_attempts=1))
    first = enqueue(queue, Step(0))
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30, max_attempts=1)),
                         shutdown_timeout=5)
    running = WorkerThread(worker, stop).start()
    try:
        wait_for(lambda: status(queue, first).state is not JobState.PENDING
                 and status(queue, first).state is not JobState.LEASED, timeout=10,
                 message="the first job's outcome")
        later = [enqueue(queue, Step(n)) for n in range(1, 4)]
        wait_for(lambda: all(status(queue, job_id).state is JobState.COMPLETED
                             for job_id in later), timeout=10,
                 message="the async jobs after it")
        found = status(queue, first)
        assert (found.state, found.last_failure) == (JobState.DEAD_LETTER,
                                                      Failure.HANDLER_FAILED)
    finally:
        stop.set()
        running.join(20)
    assert sorted(ran) == [0, 1, 2, 3]
