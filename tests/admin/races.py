"""A bulk action racing an operator's replay, for the admin, dashboard and command-line
tests: many dead letters, and a replay that starts the moment the bulk action has
deleted its first ones (so it runs while the action is still going, never before or
after it)."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Callable, List, Optional

import peewee

from caravel_lite import Dispatch, Failure, JobState, QueueAdmin
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.testing import ManualClock
from tests.admin.seed import Mail, id_boundary, make_queue

RACE_QUEUE = "race"


def dead_letters(db: peewee.Database, clock: ManualClock, count: int,
                 queue_name: str = RACE_QUEUE) -> datetime:
    """``count`` dead letters of ``queue_name``, each failed once (max_attempts 1), in
    two halves; returns the instant between them (the older half was created before
    it). Bulk actions work newest first: the older half is what they reach last."""
    queue = make_queue(db, clock)
    boundary = None
    half = count // 2
    for start, size in ((0, half), (half, count - half)):
        if start:
            boundary = id_boundary()
        for offset in range(0, size, 500):
            n = min(500, size - offset)
            queue.enqueue_many([(Mail(start + offset + k),
                                 Dispatch(queue=queue_name, tenant_id=f"t-{k % 3}"))
                                for k in range(n)])
            leases = queue.claim_many(queue_name, n)
            assert len(leases) == n
            with db.atomic():
                for lease in leases:
                    assert queue.fail(lease, Failure.HANDLER_FAILED)
    assert boundary is not None
    return boundary


def jobs_left(db: peewee.Database, queue_name: str = RACE_QUEUE) -> int:
    (n,) = db.execute_sql(f"SELECT COUNT(*) FROM {JOBS_TABLE} WHERE queue = {db.param}",
                          (queue_name,)).fetchone()
    return int(n)


def states_left(db: peewee.Database, queue_name: str = RACE_QUEUE) -> List[JobState]:
    rows = db.execute_sql(f"SELECT state FROM {JOBS_TABLE} WHERE queue = {db.param}",
                          (queue_name,)).fetchall()
    return [JobState(row[0]) for row in rows]


@dataclass
class Race:
    """What happened: how many jobs the replay replayed (>0 proves it ran while the
    bulk action was still going: before the action's end there was a dead letter left
    to replay), and whether the action had ended when the replay started."""

    replayed: int
    action_done_before_replay: bool


def replay_during(db: peewee.Database, clock: ManualClock, count: int, older: datetime,
                  action_running: Callable[[], bool], timeout: float = 120.0,
                  queue_name: str = RACE_QUEUE) -> Race:
    """Wait (on ``db``'s connection, in this thread) until fewer than ``count`` jobs of
    the queue are left, that is until the bulk action running elsewhere has deleted
    its first (newest) ones, then replay the dead letters created before ``older``
    (the half the action reaches last) at once."""
    deadline = time.monotonic() + timeout
    while jobs_left(db, queue_name) >= count:
        if not action_running():
            raise AssertionError("the bulk action ended without deleting anything")
        if time.monotonic() > deadline:
            raise AssertionError("the bulk action deleted nothing in time")
        time.sleep(0.0005)
    done_before = not action_running()
    replayed = QueueAdmin(db, clock=clock).replay_many(queue=queue_name, until=older)
    return Race(replayed, done_before)


class WorkerThread:
    """A worker draining ``queue_name`` in a thread on its own connection ``db`` until
    ``stop()``; ``ran`` counts the jobs it ran, ``errors`` what it raised.
    ``job_seconds`` after each job stand for a handler's work (without it, on SQLite, a
    worker that claims back to back can hold the write lock for as long as it has
    jobs, and a bulk action waiting in the busy handler acts only after it)."""

    def __init__(self, db: peewee.Database, clock: ManualClock, queue_name: str,
                 job_seconds: float = 0.0, **options: object) -> None:
        from caravel_lite import QueueWorker

        self.ran: List[int] = []
        self.errors: List[BaseException] = []
        self._stop = threading.Event()
        worker = QueueWorker(make_queue(db, clock, **options))

        def work() -> None:
            try:
                while not self._stop.is_set():
                    if worker.run_once(queue_name):
                        self.ran.append(1)
                        if job_seconds:
                            time.sleep(job_seconds)
            except BaseException as exc:  # reported by the test
                self.errors.append(exc)
            finally:
                worker.close()
                db.close()
        self._thread = threading.Thread(target=work)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


class InThread:
    """Run ``target`` in a thread; ``running()`` until it returns; ``result()`` its
    value (or its exception, raised)."""

    def __init__(self, target: Callable[[], object]) -> None:
        self._value: object = None
        self._error: Optional[BaseException] = None
        self._done = threading.Event()

        def run() -> None:
            try:
                self._value = target()
            except BaseException as exc:  # re-raised by result()
                self._error = exc
            finally:
                self._done.set()
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def running(self) -> bool:
        return not self._done.is_set()

    def result(self, timeout: float = 120.0) -> object:
        assert self._done.wait(timeout), "the bulk action did not end"
        if self._error is not None:
            raise self._error
        return self._value


def check_outcome(db: peewee.Database, count: int, deleted: int, race: Race) -> None:
    """Every job the replay replayed is still there and pending; the action deleted
    only the others; and the two really overlapped."""
    assert not race.action_done_before_replay, "no overlap: the action had ended"
    assert race.replayed > 0, "no overlap: nothing was left to replay"
    left = states_left(db)
    assert len(left) == race.replayed, (
        f"{race.replayed} jobs were replayed, {len(left)} are left: the bulk delete "
        f"deleted {race.replayed - len(left)} live (replayed, pending) jobs")
    assert set(left) == {JobState.PENDING}
    assert deleted + race.replayed == count
