"""A rate limit in real time, through a worker of 4 threads: starts come in bursts of
at most N per period (wide margins: the machine is shared)."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

from caravel_lite import JobRegistry, QueueWorker
from tests.flow.jobs import QUEUE, Task, make_queue, to
from tests.support import wait_for

RATE = 5
JOBS = 15


def test_a_worker_starts_at_most_n_jobs_per_period(db):
    starts = []
    lock = threading.Lock()

    def handler(job, ctx):
        with lock:
            starts.append(time.monotonic())

    reg = JobRegistry()
    reg.register("flow.task.v1", Task, handler)
    queue = make_queue(db, reg, rate_limit=(RATE, timedelta(seconds=1)))
    queue.enqueue_many([(Task(i), to("t")) for i in range(JOBS)])
    stop = threading.Event()
    thread = threading.Thread(target=QueueWorker(queue, concurrency=4, poll_interval=0.1).run,
                              args=(QUEUE, stop))
    thread.start()
    try:
        wait_for(lambda: len(starts) == JOBS, timeout=60, interval=0.05,
                 message="every job to start")
    finally:
        stop.set()
        thread.join(timeout=30)
    starts.sort()
    # Three bursts: no more than RATE starts within any 0.7 s. The database counts
    # claims by its clock; a handler starts a little after its claim (0.3 s of slack
    # for a first burst that waited for its threads on a busy machine) ...
    for i in range(JOBS - RATE):
        assert starts[i + RATE] - starts[i] > 0.7, starts
    # ... and the last burst no earlier than two periods after the first.
    assert starts[-1] - starts[0] >= 1.5
