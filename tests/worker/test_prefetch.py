"""QueueWorker(prefetch=N): several leases per claim, jobs run one after another,
completions acknowledged in fenced batches (issue #6), on every database."""
from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import List

import pytest

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, JobState, QueueWorker
from caravel_lite.errors import InvalidField
from caravel_lite.testing import ManualClock

from tests.worker.helpers import (QUEUE, WorkerThread, counting, enqueue, options,
                                  status)


@dataclass(frozen=True)
class Step:
    n: int


def _registry(handle) -> JobRegistry:
    registry = JobRegistry()
    registry.register("tests.step.v1", Step, handle)
    return registry


@pytest.mark.parametrize("value", [0, 101, True, 2.0, "3"])
def test_prefetch_is_validated(db, value):
    queue = DatabaseQueue(db, JobRegistry(), options())
    with pytest.raises(InvalidField, match="prefetch"):
        QueueWorker(queue, prefetch=value)
    assert QueueWorker(queue).prefetch is None  # the adaptive default
    assert QueueWorker(queue, prefetch=100).prefetch == 100


def test_a_prefetching_worker_claims_in_batches_and_completes_every_job(db):
    ran: List[int] = []
    queue_class = counting(counting(DatabaseQueue, "claim_many"), "complete_many")
    queue = queue_class(db, _registry(lambda job, ctx: ran.append(job.n)), options(lease=30))
    ids = [enqueue(queue, Step(i)) for i in range(12)]
    worker = QueueWorker(queue, prefetch=5)
    assert sum(worker.run_once(QUEUE) for _ in range(13)) == 12
    assert ran == list(range(12))  # claim order, one after another
    assert queue.calls == 4 + 3  # claims: 5 + 5 + 2 + an empty one; 3 batches
    for job_id in ids:
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.COMPLETED, 1)


def test_acknowledgements_wait_for_the_end_of_the_batch_or_close(db):
    queue = DatabaseQueue(db, _registry(lambda job, ctx: None), options(lease=30))
    first, second, third, fourth = (enqueue(queue, Step(i)) for i in range(4))
    worker = QueueWorker(queue, prefetch=2)
    assert worker.run_once(QUEUE)
    assert status(queue, first).state is JobState.LEASED  # acknowledgement waiting
    assert worker.run_once(QUEUE)  # end of the batch: both written
    assert status(queue, first).state is JobState.COMPLETED
    assert status(queue, second).state is JobState.COMPLETED
    assert worker.run_once(QUEUE)
    assert status(queue, third).state is JobState.LEASED
    worker.close()
    assert status(queue, third).state is JobState.COMPLETED
    found = status(queue, fourth)  # claimed, never started: handed back
    assert (found.state, found.attempts) == (JobState.PENDING, 0)


def test_waiting_jobs_grown_old_are_handed_back_and_due_acks_written_in_time(db):
    """A waiting job whose lease has less than half of lease_duration left is never
    started: it is released (attempt given back). A completion waiting in the batch is
    written before its lease could run out."""
    clock = ManualClock()
    ran: List[int] = []

    def handle(job: Step, ctx: JobContext) -> None:
        ran.append(job.n)
        if job.n == 0:
            clock.advance(timedelta(seconds=1.5))  # 0.5 s of the 2 s lease left

    queue = DatabaseQueue(db, _registry(handle), options(lease=2), clock=clock)
    ids = [enqueue(queue, Step(i)) for i in range(3)]
    worker = QueueWorker(queue, prefetch=3)
    assert worker.run_once(QUEUE)
    # Job 0's acknowledgement was due (under half a lease left): written before the
    # next job was looked at; jobs 1 and 2 were too old to start: handed back.
    assert worker.run_once(QUEUE)
    assert status(queue, ids[0]).state is JobState.COMPLETED
    assert ran == [0]
    for job_id in ids[1:2]:
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.PENDING, 0)
    # The next run_once (job 2, also too old) hands it back too, then claims job 1
    # afresh: its first attempt again.
    while worker.run_once(QUEUE):
        pass
    worker.close()
    assert sorted(ran) == [0, 1, 2]
    for job_id in ids:
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.COMPLETED, 1)


def test_an_expired_waiting_job_is_not_run(db):
    clock = ManualClock()
    ran: List[int] = []

    def handle(job: Step, ctx: JobContext) -> None:
        ran.append(job.n)
        if job.n == 0:
            clock.advance(timedelta(seconds=3))  # past the shared 2 s lease

    queue = DatabaseQueue(db, _registry(handle), options(lease=2), clock=clock)
    ids = [enqueue(queue, Step(i)) for i in range(2)]
    worker = QueueWorker(queue, prefetch=2)
    assert worker.run_once(QUEUE) and worker.run_once(QUEUE)
    worker.close()
    assert ran == [0]
    for job_id in ids:  # neither acknowledged: taken again after the lease
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.LEASED, 1)


def test_the_supervisor_writes_a_due_acknowledgement_while_a_long_handler_runs(db, connect):
    clock = ManualClock()
    observer = DatabaseQueue(connect(), JobRegistry(), options(lease=2), clock=clock)
    written: List[bool] = []

    def handle(job: Step, ctx: JobContext) -> None:
        if job.n == 1:
            clock.advance(timedelta(seconds=1.2))  # job 0's ack now has 0.8 s left
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if observer.status(ids[0], QUEUE, "tenant-a").state is JobState.COMPLETED:
                    written.append(True)
                    return
                time.sleep(0.05)
            written.append(False)

    queue = DatabaseQueue(db, _registry(handle), options(lease=2), clock=clock)
    ids = [enqueue(queue, Step(i)) for i in range(2)]
    worker = QueueWorker(queue, prefetch=2)
    assert worker.run_once(QUEUE) and worker.run_once(QUEUE)
    worker.close()
    observer.db.close()
    assert written == [True]
    assert status(queue, ids[1]).state is JobState.COMPLETED


def test_a_stale_lease_in_a_batched_acknowledgement_does_not_block_the_others(db, connect):
    intruder = connect()

    def handle(job: Step, ctx: JobContext) -> None:
        if job.n == 0:  # another owner's token replaces ours after the handler started
            intruder.execute_sql(
                f"UPDATE caravel_jobs SET lease_token = {intruder.param} "
                f"WHERE id = {intruder.param}", ("stolen", str(ctx.job_id)))

    queue = DatabaseQueue(db, _registry(handle), options(lease=30))
    ids = [enqueue(queue, Step(i)) for i in range(3)]
    worker = QueueWorker(queue, prefetch=3)
    assert [worker.run_once(QUEUE) for _ in range(3)] == [True, True, True]
    assert status(queue, ids[0]).state is JobState.LEASED
    assert [status(queue, i).state for i in ids[1:]] == [JobState.COMPLETED] * 2


def test_stop_mid_batch_writes_the_finished_and_hands_back_the_unstarted(db, connect):
    stop = threading.Event()
    ran: List[int] = []
    cancelled: List[bool] = []

    def handle(job: Step, ctx: JobContext) -> None:
        ran.append(job.n)
        if job.n == 1:
            stop.set()
            cancelled.append(ctx.cancelled.wait(10))
            ctx.raise_if_cancelled()  # stops without finishing: left leased

    queue = DatabaseQueue(connect(), _registry(handle), options(lease=30))
    ids = [enqueue(queue, Step(i)) for i in range(3)]
    WorkerThread(QueueWorker(queue, prefetch=3), stop).start().join(20)
    assert ran == [0, 1] and cancelled == [True]
    reader = DatabaseQueue(db, JobRegistry(), options())
    assert status(reader, ids[0]).state is JobState.COMPLETED
    found = status(reader, ids[1])
    assert (found.state, found.attempts) == (JobState.LEASED, 1)
    found = status(reader, ids[2])  # never started: released, attempt given back
    assert (found.state, found.attempts) == (JobState.PENDING, 0)


def test_no_thread_is_started_per_job(db):
    before = threading.active_count()
    counts: List[int] = []
    queue = DatabaseQueue(db, _registry(lambda job, ctx: counts.append(
        threading.active_count())), options())
    for i in range(20):
        enqueue(queue, Step(i))
    worker = QueueWorker(queue, prefetch=4)
    while worker.run_once(QUEUE):
        pass
    # The two supervising threads at most: the deadline keeper and the renewer.
    assert len(counts) == 20 and max(counts) <= before + 2
    threads = [worker._supervisor.deadlines.thread, worker._supervisor.renewer.thread]
    assert all(thread is not None and thread.is_alive() for thread in threads)
    worker.close()  # ends them
    assert not any(thread.is_alive() for thread in threads)


def test_prefetch_one_claims_and_completes_one_job_at_a_time(db):
    queue_class = counting(counting(DatabaseQueue, "claim"), "complete")
    queue = queue_class(db, _registry(lambda job, ctx: None), options())
    job_id = enqueue(queue, Step(1))
    worker = QueueWorker(queue)
    assert worker.run_once(QUEUE) and not worker.run_once(QUEUE)
    assert queue.calls == 2 + 1
    assert status(queue, job_id).state is JobState.COMPLETED
    assert isinstance(job_id, uuid.UUID)
