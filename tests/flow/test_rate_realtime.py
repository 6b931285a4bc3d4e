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


def test_a_job_held_back_by_its_key_starts_when_the_workers_own_job_ends(db):
    """The worker claims again as soon as one of its jobs ends while others wait behind
    a limit, not at its next poll (PostgreSQL's change signal does not fire on a
    completion, MariaDB's poll is slow when idle): 20 jobs of one key, two at a time,
    under a 5 s poll interval."""
    done = []
    reg = JobRegistry()
    reg.register("flow.task.v1", Task, lambda job, ctx: done.append(job.n),
                 concurrency_limit=2)
    queue = make_queue(db, reg)
    queue.enqueue_many([(Task(i), to("t", key="k")) for i in range(20)])
    stop = threading.Event()
    thread = threading.Thread(target=QueueWorker(queue, poll_interval=5.0).run,
                              args=(QUEUE, stop))
    started = time.monotonic()
    thread.start()
    try:
        wait_for(lambda: len(done) == 20, timeout=60, interval=0.05,
                 message="every job to run")
    finally:
        stop.set()
        thread.join(timeout=30)
    assert time.monotonic() - started < 5.0
