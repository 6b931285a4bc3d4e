"""QueueWorker(concurrency=N) on every database: each job runs once, N at a time; async
handlers share one event loop; renewal and deadline cancellation per job with N > 1;
the worker's connections stay within the bound stated in docs/how-to/tuning.md (3)."""
from __future__ import annotations

import asyncio
import os
import threading
import time
from dataclasses import dataclass
from typing import Dict, List, Set, Tuple

from caravel_lite import DatabaseQueue, Dispatch, JobContext, JobRegistry, JobState, QueueWorker

from tests.support import wait_for
from tests.worker.helpers import QUEUE, TENANT, WorkerThread, options, status


@dataclass(frozen=True)
class Nap:
    n: int


class Tracker:
    """Records each execution (job, start, end) and the peak of simultaneous ones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.runs: List[Tuple[int, float, float]] = []
        self.loops: Set[int] = set()
        self.threads: Set[int] = set()

    def enter(self) -> float:
        with self.lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
            self.threads.add(threading.get_ident())
        return time.monotonic()

    def leave(self, n: int, started: float) -> None:
        with self.lock:
            self.running -= 1
            self.runs.append((n, started, time.monotonic()))


def _enqueue_all(queue: DatabaseQueue, count: int) -> List:
    return [r.job_id for r in queue.enqueue_many(
        [(Nap(n), Dispatch(queue=QUEUE, tenant_id=TENANT)) for n in range(count)])]


def test_ten_slots_run_200_jobs_of_50_ms_each_once(db, connect):
    tracker = Tracker()
    registry = JobRegistry()

    @registry.job("tests.nap.v1", Nap)
    def nap(job: Nap, ctx: JobContext) -> None:
        started = tracker.enter()
        time.sleep(0.05)
        tracker.leave(job.n, started)

    queue = DatabaseQueue(db, registry, options(lease=30))
    ids = _enqueue_all(queue, 200)
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)), concurrency=10)
    running = WorkerThread(worker, stop).start()
    wait_for(lambda: len(tracker.runs) == 200, timeout=60, message="200 jobs")
    stop.set()
    running.join(20)
    assert sorted(n for n, _, _ in tracker.runs) == list(range(200))  # each exactly once
    assert 2 <= tracker.peak <= 10 and len(tracker.threads) <= 10
    counts = queue.counts(QUEUE)
    assert (counts.completed, counts.ready, counts.active_leases) == (200, 0, 0)
    assert {status(queue, job_id).attempts for job_id in ids} == {1}


def test_fifty_async_handlers_share_one_event_loop(db, connect):
    tracker = Tracker()
    registry = JobRegistry()

    @registry.job("tests.nap.v1", Nap)
    async def nap(job: Nap, ctx: JobContext) -> None:
        started = tracker.enter()
        tracker.loops.add(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.05)
        tracker.leave(job.n, started)

    queue = DatabaseQueue(db, registry, options(lease=30))
    _enqueue_all(queue, 150)
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)), concurrency=50)
    running = WorkerThread(worker, stop).start()
    wait_for(lambda: len(tracker.runs) == 150, timeout=60, message="150 async jobs")
    stop.set()
    running.join(20)
    assert sorted(n for n, _, _ in tracker.runs) == list(range(150))
    assert len(tracker.loops) == 1 and len(tracker.threads) == 1  # one loop, one thread
    assert 10 < tracker.peak <= 50
    assert queue.counts(QUEUE).completed == 150


def test_each_running_job_is_renewed_on_its_own(db, connect):
    registry = JobRegistry()
    opts = options(lease=2, renew=0.25)
    rival = DatabaseQueue(connect(), registry, opts)
    tracker = Tracker()
    seen: Dict[int, object] = {}

    @registry.job("tests.nap.v1", Nap)
    def nap(job: Nap, ctx: JobContext) -> None:
        started = tracker.enter()
        time.sleep(2.6)  # well past the 2 s the claim granted
        seen[job.n] = ctx.cancelled.is_set()
        tracker.leave(job.n, started)

    queue = DatabaseQueue(db, registry, opts)
    ids = _enqueue_all(queue, 3)
    stop = threading.Event()
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, opts),
                                       concurrency=3), stop).start()
    wait_for(lambda: tracker.peak == 3, message="three jobs running")
    time.sleep(2.2)
    assert rival.claim(QUEUE) is None  # every lease was renewed
    wait_for(lambda: len(tracker.runs) == 3, message="the jobs to end")
    stop.set()
    running.join()
    assert seen == {0: False, 1: False, 2: False}
    for job_id in ids:
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.COMPLETED, 1)


def test_each_running_job_is_cancelled_at_its_own_deadline(db, connect):
    registry = JobRegistry()
    opts = options(lease=1)
    cancelled: Dict[int, bool] = {}

    @registry.job("tests.nap.v1", Nap)
    def nap(job: Nap, ctx: JobContext) -> None:
        if ctx.attempt == 1 and job.n < 2:  # jobs 0 and 1 overrun their first lease
            cancelled[job.n] = ctx.cancelled.wait(10)
            ctx.raise_if_cancelled()

    queue = DatabaseQueue(db, registry, opts)
    ids = _enqueue_all(queue, 3)
    stop = threading.Event()
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, opts),
                                       concurrency=3, poll_interval=0.1), stop).start()
    wait_for(lambda: queue.counts(QUEUE).completed == 3, timeout=20,
             message="the overrunning jobs to be taken again and completed")
    stop.set()
    running.join()
    assert cancelled == {0: True, 1: True}
    assert [status(queue, job_id).attempts for job_id in ids] == [2, 2, 1]


def _connections(db, backend: str, path: str = "") -> int:
    if backend == "postgres":
        return db.execute_sql("SELECT count(*) FROM pg_stat_activity "
                              "WHERE datname = current_database()").fetchone()[0]
    if backend == "mysql":
        return db.execute_sql("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                              "WHERE DB = DATABASE()").fetchone()[0]
    # SQLite: file descriptors of this process open on the database file.
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == path:
                count += 1
        except OSError:
            pass
    return count


def test_connections_stay_within_three_whatever_the_concurrency(db, connect, backend, db_url):
    registry = JobRegistry()
    release = threading.Event()
    tracker = Tracker()

    @registry.job("tests.nap.v1", Nap)
    def nap(job: Nap, ctx: JobContext) -> None:
        started = tracker.enter()
        release.wait(30)
        tracker.leave(job.n, started)

    path = db.database if backend == "sqlite" else ""
    opts = options(lease=30, renew=0.2)  # renewals run: the supervisor's connection too
    queue = DatabaseQueue(db, registry, opts)
    _enqueue_all(queue, 40)
    baseline = _connections(db, backend, path)
    stop = threading.Event()
    running = WorkerThread(QueueWorker(DatabaseQueue(connect(), registry, opts),
                                       concurrency=20), stop).start()
    try:
        wait_for(lambda: tracker.running == 20, message="twenty jobs running")
        time.sleep(0.6)  # a few renewals
        held = _connections(db, backend, path) - baseline
    finally:
        release.set()
        stop.set()
        running.join(20)
    assert 1 <= held <= 3, held
