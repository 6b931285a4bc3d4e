"""Jobs handed to a slot in one run with a handler that turns slow are not held behind
it while other slots are free (every database): the loop takes back the ones that did
not start and hands them to free slots. Before, they waited out their leases there,
were taken over with an attempt spent, and with max_attempts=1 dead-lettered without
their handler ever running."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Dict

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, JobState, QueueWorker

from tests.support import wait_for
from tests.worker.helpers import QUEUE, WorkerThread, enqueue, options, status

FAST = 300  # jobs before the slow one: the worker learns they are fast (long runs)
AFTER = 200


@dataclass(frozen=True)
class Step:
    n: int


def test_jobs_queued_behind_a_slow_handler_go_to_free_slots(db, connect):
    registry = JobRegistry()
    done: Dict[int, float] = {}
    release = threading.Event()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        if job.n == FAST:
            release.wait(30)  # turns slow; renewed all along
        done[job.n] = time.monotonic()

    opts = options(lease=3, renew=0.5, max_attempts=1)
    queue = DatabaseQueue(db, registry, opts)
    ids = [enqueue(queue, Step(n)) for n in range(FAST + 1 + AFTER)]
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, opts), concurrency=4,
                         prefetch=100)
    began = time.monotonic()
    running = WorkerThread(worker, stop).start()
    try:
        # Every other job ends well inside one lease (3 s) of the slow one's start.
        wait_for(lambda: len(done) == FAST + AFTER, timeout=20, message="the other jobs")
        assert max(done.values()) - began < 2.5
    finally:
        release.set()
        stop.set()
        running.join(20)
    for n, job_id in enumerate(ids):
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.COMPLETED, 1), n
