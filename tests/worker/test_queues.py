"""One worker, several queues (every database): earlier queues first, every 4th claim
round in rotation, so a later queue is served under load; repeated names serve once."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import List

import pytest

from caravel_lite import DatabaseQueue, Dispatch, JobContext, JobRegistry, QueueWorker
from caravel_lite.errors import InvalidField
from caravel_lite.values import ClaimBatch
from caravel_lite.worker import waiter as waiter_module

from tests.support import wait_for
from tests.worker.helpers import TENANT, options

CRITICAL, DEFAULT = "critical", "default"


@dataclass(frozen=True)
class Task:
    n: int


def _worker_run(worker: QueueWorker, names, stop: threading.Event, errors: list) -> None:
    try:
        worker.run(names, stop=stop)
    except BaseException as exc:
        errors.append(exc)
    finally:
        worker.queue.db.close()


def _enqueue(queue: DatabaseQueue, name: str, count: int) -> None:
    queue.enqueue_many([(Task(n), Dispatch(queue=name, tenant_id=TENANT))
                        for n in range(count)])


def test_earlier_queues_first_and_every_fourth_round_in_rotation(db, connect):
    served: List[str] = []
    registry = JobRegistry()
    registry.register("tests.task.v1", Task, lambda job, ctx: served.append(ctx.queue))
    queue = DatabaseQueue(db, registry, options(lease=30))
    _enqueue(queue, CRITICAL, 8)
    _enqueue(queue, DEFAULT, 8)
    stop, errors = threading.Event(), []
    # One job per claim round: rounds 4 and 12 lead with "default", round 8 with
    # "critical"; once "critical" is empty, "default" is served every round.
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)), prefetch=1)
    thread = threading.Thread(target=_worker_run,
                              args=(worker, [CRITICAL, DEFAULT, CRITICAL], stop, errors))
    thread.start()
    wait_for(lambda: len(served) == 16, message="sixteen jobs")
    stop.set()
    thread.join(10)
    assert not errors
    c, d = CRITICAL, DEFAULT
    assert served == [c, c, c, d, c, c, c, c, c, d, d, d, d, d, d, d]


def test_a_later_queue_is_served_while_an_earlier_one_never_empties(db, connect):
    served: List[str] = []
    registry = JobRegistry()
    producer = DatabaseQueue(db, registry, options(lease=30))
    lock = threading.Lock()

    @registry.job("tests.task.v1", Task)
    def handle(job: Task, ctx: JobContext) -> None:
        with lock:
            served.append(ctx.queue)
        if ctx.queue == CRITICAL:  # every critical job brings another: endless load
            worker_queue.enqueue(Task(job.n + 1), Dispatch(queue=CRITICAL, tenant_id=TENANT))

    _enqueue(producer, CRITICAL, 3)
    _enqueue(producer, DEFAULT, 20)
    worker_queue = DatabaseQueue(connect(), registry, options(lease=30))
    stop, errors = threading.Event(), []
    worker = QueueWorker(worker_queue, prefetch=1)
    thread = threading.Thread(target=_worker_run, args=(worker, [CRITICAL, DEFAULT], stop,
                                                        errors))
    thread.start()
    wait_for(lambda: len(served) >= 80, timeout=60, message="eighty jobs")
    stop.set()
    thread.join(10)
    assert not errors
    first = served[:80]
    # Two queues: "default" leads at least one round of every 8.
    assert first.count(DEFAULT) >= 80 // 8
    assert first.count(CRITICAL) >= 80 * 3 // 4
    assert max(len(run) for run in "".join("c" if q == CRITICAL else "d"
                                           for q in first).split("d")) <= 7


@pytest.mark.parametrize("names", [[], "Not A Queue", ["ok", 3], 5])
def test_queue_names_are_validated(db, names):
    worker = QueueWorker(DatabaseQueue(db, JobRegistry(), options()))
    with pytest.raises(InvalidField):
        worker.run(names, stop=threading.Event())


class Contended(DatabaseQueue):
    """Its first claims lose every race (as on MariaDB's portable claim path under
    contention): nothing leased, ``contended`` True."""

    losses = 3
    calls = 0

    def claim_batch(self, queue_name, limit, **options):
        self.calls += 1
        if self.losses > 0:
            self.losses -= 1
            return ClaimBatch((), True)
        return super().claim_batch(queue_name, limit, **options)


def test_a_claim_that_lost_every_race_is_repeated_at_once(db, connect, monkeypatch):
    """Not after poll_interval (30 s here), and without going idle in between."""
    ran: List[int] = []
    registry = JobRegistry()
    registry.register("tests.task.v1", Task, lambda job, ctx: ran.append(job.n))
    _enqueue(DatabaseQueue(db, registry, options(lease=30)), CRITICAL, 1)
    waits: List[int] = []
    real = waiter_module.waiter_for

    def counting_waiter(queue, names):
        inner = real(queue, names)
        original = inner.wait

        def wait(wakeup, timeout):
            waits.append(len(ran))
            return original(wakeup, timeout)
        inner.wait = wait
        return inner

    monkeypatch.setattr(waiter_module, "waiter_for", counting_waiter)
    contended = Contended(connect(), registry, options(lease=30))
    stop, errors = threading.Event(), []
    thread = threading.Thread(target=_worker_run, args=(QueueWorker(contended, poll_interval=30),
                                                        [CRITICAL], stop, errors))
    thread.start()
    wait_for(lambda: ran == [0], timeout=10, message="the job, soon after three lost races")
    stop.set()
    thread.join(10)
    assert not errors
    assert contended.calls >= 4
    assert 0 not in waits  # never idle before the job was taken
