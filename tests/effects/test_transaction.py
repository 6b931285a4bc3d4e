"""ctx.transaction() (issue 24), every database: the handler's writes and the job's
completion commit together, fenced by the lease token. If the block committed the job
never runs again (a kill -9 right after the commit); if it did not, none of its writes
exist (an error in the block, a kill -9 inside it, the lease taken over before the
commit: LeaseLost, and the new owner's run is the only one recorded); a renewal running
while the block holds its locks does not deadlock (SQLite: the write lock)."""
from __future__ import annotations

import multiprocessing
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, List

import pytest

from caravel_lite import (DatabaseQueue, Dispatch, Failure, JobState, LeaseLost, QueueAdmin,
                          QueueWorker)

from tests.effects import jobs
from tests.effects.jobs import QUEUE, TENANT, Write
from tests.support import wait_for

LEASE = timedelta(seconds=1)


def _enqueue(queue: DatabaseQueue, job: Write) -> Any:
    return queue.enqueue(job, Dispatch(tenant_id=TENANT)).job_id


def _status(queue: DatabaseQueue, job_id: Any) -> Any:
    found = queue.status(job_id, queue=QUEUE, tenant_id=TENANT)
    assert found is not None
    return found


def test_the_block_commits_the_writes_with_the_completion(app_db):
    queue = jobs.make_queue(app_db, lease_duration=LEASE)
    job_id = _enqueue(queue, Write(1))
    assert QueueWorker(queue).run_once(QUEUE)
    found = _status(queue, job_id)
    assert (found.state, found.attempts) == (JobState.COMPLETED, 1)
    assert jobs.effects(app_db) == [(str(job_id), 1, 1)]
    assert QueueWorker(queue).run_once(QUEUE) is False


def test_an_error_in_the_block_rolls_its_writes_back_and_the_job_retries(app_db):
    queue = jobs.make_queue(app_db, lease_duration=LEASE)
    job_id = _enqueue(queue, Write(2, crash="raise"))
    assert QueueWorker(queue).run_once(QUEUE)
    found = _status(queue, job_id)
    assert (found.state, found.last_failure) == (JobState.PENDING, Failure.HANDLER_FAILED)
    assert jobs.effects(app_db) == []


def test_outside_a_worker_or_nested_in_a_transaction_the_block_is_refused(app_db):
    queue = jobs.make_queue(app_db, lease_duration=LEASE)
    lease = queue.claim(QUEUE) if _enqueue(queue, Write(3)) else None
    assert lease is not None
    with pytest.raises(RuntimeError):
        with lease.context.transaction():
            pass
    jobs.hooks.inside = None
    nested: List[BaseException] = []

    def handler_in_a_transaction(job: Any, ctx: Any) -> None:
        with app_db.atomic():
            try:
                with ctx.transaction():
                    pass
            except RuntimeError as exc:
                nested.append(exc)
    registry = jobs.JobRegistry()
    registry.register("effects.nested.v1", Write, handler_in_a_transaction, queue="nested")
    other = DatabaseQueue(app_db, registry)
    other.enqueue(Write(4), Dispatch(tenant_id=TENANT))
    assert QueueWorker(other).run_once("nested")
    assert len(nested) == 1


def test_a_lease_taken_over_before_the_commit_rolls_the_writes_back(app_db):
    """Worker A's block writes, then waits while its lease expires and worker B takes
    the job over (on SQLite B's claim waits for A's write lock); at the end of A's
    block the fenced completion matches nothing: LeaseLost, A's write rolled back, A
    writes nothing more, and B's run is the only one recorded."""
    first = jobs.make_queue(app_db, lease_duration=LEASE)
    second = jobs.make_queue(app_db, lease_duration=LEASE)
    job_id = _enqueue(first, Write(5))
    inside, go = threading.Event(), threading.Event()

    def hold(ctx: Any) -> None:
        if ctx.attempt == 1:
            inside.set()
            assert go.wait(20)
    jobs.hooks.inside = hold
    admin = QueueAdmin(app_db)
    a = threading.Thread(target=lambda: (QueueWorker(first).run_once(QUEUE), app_db.close()))
    a.start()
    assert inside.wait(10)
    expiry = admin.job(job_id).lease_expires_at
    wait_for(lambda: datetime.now(timezone.utc) > expiry, message="the lease's expiry")
    b_done = threading.Event()
    b = threading.Thread(target=lambda: (QueueWorker(second).run_once(QUEUE), app_db.close(),
                                         b_done.set()))
    b.start()
    if first.dialect.immediate_writes:
        go.set()  # B's claim waits for A's write lock: A's block must end first
    else:
        assert b_done.wait(20), "B took the job over and completed it while A's block ran"
        go.set()
    a.join(20)
    b.join(20)
    assert jobs.hooks.lease_lost == [1]
    found = _status(first, job_id)
    assert (found.state, found.attempts) == (JobState.COMPLETED, 2)
    assert jobs.effects(app_db) == [(str(job_id), 2, 5)]


class _WatchedRenewals(DatabaseQueue):
    renewing = threading.Event()
    errors: List[BaseException] = []

    def renew(self, lease: Any) -> Any:
        self.renewing.set()
        try:
            return super().renew(lease)
        except BaseException as exc:
            self.errors.append(exc)
            raise


def test_a_renewal_while_the_block_holds_its_locks_does_not_deadlock(app_db):
    queue = jobs.make_queue(app_db, _WatchedRenewals, lease_duration=LEASE,
                            lease_renewal_interval=timedelta(milliseconds=200))
    _WatchedRenewals.renewing.clear()
    _WatchedRenewals.errors.clear()
    job_id = _enqueue(queue, Write(6))
    jobs.hooks.inside = lambda ctx: _WatchedRenewals.renewing.wait(5)
    errors: List[BaseException] = []

    def run() -> None:
        try:
            QueueWorker(queue).run_once(QUEUE)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            app_db.close()
    runner = threading.Thread(target=run)
    runner.start()
    runner.join(10)
    assert not runner.is_alive(), "deadlocked"
    assert _status(queue, job_id).state is JobState.COMPLETED
    assert _WatchedRenewals.renewing.is_set()
    assert not errors and not _WatchedRenewals.errors
    assert jobs.effects(app_db) == [(str(job_id), 1, 6)]


def _child(url: str) -> int:
    process = multiprocessing.get_context("spawn").Process(
        target=jobs.run_once_in_child, args=(url,))
    process.start()
    process.join(120)
    return int(process.exitcode if process.exitcode is not None else 0)


def test_kill_9_right_after_the_commit_never_runs_the_job_again(app_db, db_url):
    queue = jobs.make_queue(app_db, lease_duration=LEASE)
    job_id = _enqueue(queue, Write(7, crash="after"))
    assert _child(db_url) == -9
    found = _status(queue, job_id)
    assert (found.state, found.attempts) == (JobState.COMPLETED, 1)
    assert queue.reclaim_expired(QUEUE) == 0
    assert QueueWorker(queue).run_once(QUEUE) is False
    assert jobs.effects(app_db) == [(str(job_id), 1, 7)]


def test_kill_9_inside_the_block_leaves_no_write_and_the_job_runs_again(app_db, db_url):
    queue = jobs.make_queue(app_db, lease_duration=LEASE)
    job_id = _enqueue(queue, Write(8, crash="before"))
    assert _child(db_url) == -9
    assert jobs.effects(app_db) == []
    assert _status(queue, job_id).state is JobState.LEASED
    # After the lease, the job runs again (this time without the crash).
    jobs.hooks.inside = None
    lease = wait_for(lambda: queue.claim(QUEUE), timeout=10, message="the expired lease")
    assert lease.job_id == job_id and lease.attempt == 2
    assert queue.release(lease)


def test_a_block_ending_after_the_timeout_is_rolled_back_and_the_attempt_times_out(app_db):
    queue = jobs.make_queue(app_db, lease_duration=LEASE)
    job_id = queue.enqueue(Write(9), Dispatch(tenant_id=TENANT,
                                              timeout=timedelta(milliseconds=200))).job_id
    jobs.hooks.inside = lambda ctx: ctx.cancelled.wait(5)  # past the timeout, inside
    assert QueueWorker(queue).run_once(QUEUE)
    found = _status(queue, job_id)
    assert (found.state, found.last_failure) == (JobState.PENDING, Failure.TIMED_OUT)
    assert jobs.effects(app_db) == []
