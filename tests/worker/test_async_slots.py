"""Async jobs and their slots at the edges: an async job whose lease grew too old while
the loop admitted it is not started; one held behind a handler that blocks the event
loop keeps its slot until it reports (it is not taken back as a stuck sync job is)."""
from __future__ import annotations

import logging
import sqlite3
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import List

import pytest

from caravel_lite import DatabaseQueue, JobRegistry, JobState, QueueWorker

from tests.support import wait_for
from tests.worker.helpers import WorkerThread, enqueue, options, status


@dataclass(frozen=True)
class Unknown:
    n: int


@dataclass(frozen=True)
class Later:
    n: int


@dataclass(frozen=True)
class Hog:
    n: int


@dataclass(frozen=True)
class Quick:
    n: int


@dataclass(frozen=True)
class Plain:
    n: int


class HoldWriteLock(logging.Handler):
    """As the worker logs that a wire name is unknown (its failure is written next),
    another connection takes SQLite's write lock for ``seconds``."""

    def __init__(self, path: str, seconds: float) -> None:
        super().__init__()
        self.path, self.seconds = path, seconds

    def emit(self, record: logging.LogRecord) -> None:
        if "not registered here" not in record.getMessage():
            return
        ready = threading.Event()

        def hold() -> None:
            con = sqlite3.connect(self.path, timeout=10, isolation_level=None)
            con.execute("BEGIN IMMEDIATE")
            ready.set()
            time.sleep(self.seconds)
            con.execute("COMMIT")
            con.close()

        threading.Thread(target=hold, daemon=True).start()
        ready.wait(5)


@pytest.mark.backends("sqlite")  # the delay is a writer holding SQLite's one write lock
def test_an_async_job_grown_too_old_during_the_loops_pass_is_not_started(db, db_url,
                                                                           connect):
    """The loop judged the job's age, then spent 1.6 s of its 2 s lease writing another
    job's failure (its wire name unknown here) in the same pass: the async job's task
    hands it back instead of starting it with 0.4 s left."""
    lease_left: List[float] = []
    path = db_url[len("sqlite:///"):]

    async def handle(job: Later, ctx) -> None:
        con = sqlite3.connect(path, timeout=10)
        (expires_ms,) = con.execute("SELECT lease_expires_at FROM caravel_jobs WHERE id = ?",
                                    (str(ctx.job_id),)).fetchone()
        con.close()
        lease_left.append(expires_ms / 1000 - datetime.now(timezone.utc).timestamp())

    producing = JobRegistry()
    producing.register("tests.unknown.v1", Unknown, lambda job, ctx: None)
    producing.register("tests.async.v1", Later, handle)
    working = JobRegistry()
    working.register("tests.async.v1", Later, handle)
    queue = DatabaseQueue(db, producing, options(lease=2))
    enqueue(queue, Unknown(0))  # claimed first, unknown to the worker
    time.sleep(0.005)
    late = enqueue(queue, Later(1))
    holder = HoldWriteLock(path, 1.6)
    log = logging.getLogger("caravel_lite")
    log.addHandler(holder)
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), working, options(lease=2)),
                         concurrency=2, poll_interval=0.2, shutdown_timeout=1)
    running = WorkerThread(worker, stop).start()
    try:
        wait_for(lambda: status(queue, late).state is JobState.COMPLETED, timeout=15,
                 message="the async job, run on a lease young enough")
    finally:
        log.removeHandler(holder)
        stop.set()
        running.join(15)
    assert lease_left and min(lease_left) >= 1.0  # never started with under half left


def test_an_async_job_behind_a_blocked_event_loop_keeps_its_slot(db, connect):
    """A handler that blocks the event loop for 1.5 s holds the next async job's task
    back past STUCK_IN_RUN; it is not taken back (its task would then end without a
    report and its slot stay taken for good): afterwards all six slots run."""
    active, most = [0], [0]
    lock = threading.Lock()

    async def hog(job: Hog, ctx) -> None:
        time.sleep(1.5)  # blocks the worker's event loop

    async def quick(job: Quick, ctx) -> None:
        pass

    def plain(job: Plain, ctx) -> None:
        with lock:
            active[0] += 1
            most[0] = max(most[0], active[0])
        time.sleep(0.5)
        with lock:
            active[0] -= 1

    registry = JobRegistry()
    registry.register("tests.hog.v1", Hog, hog)
    registry.register("tests.quick.v1", Quick, quick)
    registry.register("tests.plain.v1", Plain, plain)
    queue = DatabaseQueue(db, registry, options(lease=30))
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         concurrency=6, poll_interval=0.2, shutdown_timeout=1)
    running = WorkerThread(worker, stop).start()
    try:
        first = [enqueue(queue, Hog(0))]
        time.sleep(0.005)  # the quick one claimed behind the hog
        first.append(enqueue(queue, Quick(1)))
        wait_for(lambda: all(status(queue, j).state is JobState.COMPLETED for j in first),
                 timeout=10, message="the two async jobs")
        plains = [enqueue(queue, Plain(i)) for i in range(6)]
        wait_for(lambda: all(status(queue, j).state is JobState.COMPLETED for j in plains),
                 timeout=15, message="six sync jobs")
    finally:
        stop.set()
        running.join(15)
    assert most[0] == 6
