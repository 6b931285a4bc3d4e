"""A job the worker ran leaves nothing for Python's cycle collector: its lease, context
and control are freed by reference counting when it ends. A cycle among them cost a
fast worker's drain about 5% of its rate (the collector ran often and walked a dozen
objects per job), so this is a property worth a test."""
from __future__ import annotations

import gc
import threading
from dataclasses import dataclass

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, QueueLease, QueueWorker
from caravel_lite.worker.supervisor import JobControl

from tests.worker.helpers import QUEUE, enqueue, options

JOBS = 20


@dataclass(frozen=True)
class Tick:
    n: int


def test_the_jobs_a_worker_ran_leave_no_reference_cycle_behind(db):
    stop = threading.Event()
    ran = []
    progress = []
    registry = JobRegistry()

    @registry.job("tests.tick.v1", Tick)
    def tick(job: Tick, ctx: JobContext) -> None:
        ctx.progress(job.n, JOBS)  # the handler's way to its control stays usable
        progress.append(ctx)
        ran.append(job.n)
        if len(ran) == JOBS:
            stop.set()

    queue = DatabaseQueue(db, registry, options())
    for n in range(JOBS):
        enqueue(queue, Tick(n))
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        QueueWorker(queue).run(QUEUE, stop=stop)
        assert sorted(ran) == list(range(JOBS))
        progress[0].progress(1, 2)  # after its job ended: checked, then dropped
        progress.clear()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage
                if isinstance(o, (QueueLease, JobContext, JobControl))]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if enabled:
            gc.enable()
    assert left == []
