"""Cancel (issue 25), as the queue and the operator see it, on every database: a
pending or delayed job becomes CANCELLED at once (a final state: counted, listed,
filtered, replayable, keeping its key); a leased one gets a request that holds back
every way it could run again, and ends CANCELLED at its lease's expiry when no worker
ends it first."""
from __future__ import annotations

from datetime import timedelta

import pytest

from caravel_lite import (DatabaseQueue, Dispatch, Failure, InvalidField, JobState,
                          QueueAdmin, QueueOptions)
from caravel_lite.testing import ManualClock
from tests.control.app import OTHER, QUEUE, TENANT, Quick, registry


def make(db, clock, **options):
    return DatabaseQueue(db, registry, QueueOptions(lease_duration=timedelta(seconds=10),
                                                    **options), clock=clock)


def enqueue(queue, n=1, *, key=None, queue_name=QUEUE, delay=None, tenant=TENANT):
    not_before = queue.clock() + delay if delay else None
    return queue.enqueue(Quick(n), Dispatch(queue=queue_name, tenant_id=tenant,
                                            idempotency_key=key, not_before=not_before)).job_id


def state(queue, job_id, tenant=TENANT, queue_name=QUEUE):
    return queue.status(job_id, queue_name, tenant).state


@pytest.fixture
def clock():
    return ManualClock()


def test_pending_and_delayed_jobs_are_cancelled_at_once_and_never_claimed(db, clock):
    queue = make(db, clock)
    waiting = enqueue(queue, 1, key="k1")
    delayed = enqueue(queue, 2, delay=timedelta(minutes=5))
    assert queue.cancel(waiting, QUEUE, TENANT)
    assert QueueAdmin(db, clock=clock).cancel(delayed)
    assert state(queue, waiting) is state(queue, delayed) is JobState.CANCELLED
    clock.advance(timedelta(minutes=10))
    assert queue.claim(QUEUE) is None
    counts = queue.counts(QUEUE)
    assert (counts.cancelled, counts.ready, counts.delayed) == (2, 0, 0)
    # final, listed and filtered, keeps its key, a repeat is False
    assert not queue.cancel(waiting, QUEUE, TENANT)
    admin = QueueAdmin(db, clock=clock)
    assert {j.job_id for j in admin.jobs(queue=QUEUE, state="cancelled")} == {waiting, delayed}
    again = queue.enqueue(Quick(1), Dispatch(queue=QUEUE, tenant_id=TENANT, idempotency_key="k1"))
    assert again.job_id == waiting and again.already_enqueued
    assert admin.job(waiting).finished_at == clock() - timedelta(minutes=10)


def test_cancel_is_scoped_to_the_exact_tenant_and_queue(db, clock):
    queue = make(db, clock)
    job = enqueue(queue)
    assert not queue.cancel(job, QUEUE, TENANT.upper())
    assert not queue.cancel(job, QUEUE, TENANT + " ")
    assert not queue.cancel(job, OTHER, TENANT)
    assert state(queue, job) is JobState.PENDING
    with pytest.raises(InvalidField) as info:
        queue.cancel(job, QUEUE, "")
    assert info.value.field == "tenant_id"


def test_a_leased_job_gets_a_request_and_ends_cancelled_when_its_lease_expires(db, clock):
    queue = make(db, clock)
    job = enqueue(queue)
    lease = queue.claim(QUEUE)
    assert queue.cancel(job, QUEUE, TENANT) and queue.cancel(job, QUEUE, TENANT)  # repeatable
    admin = QueueAdmin(db, clock=clock)
    detail = admin.job(job)
    assert detail.state is JobState.LEASED and detail.cancel_requested_at == clock()
    assert queue.renew(lease) is not None  # the worker keeps its lease till it ends
    clock.advance(timedelta(seconds=11))  # the worker is gone: the lease expires
    assert queue.claim(QUEUE) is None  # never run again
    assert state(queue, job) is JobState.CANCELLED


@pytest.mark.parametrize("how", ["fail", "fail-last", "discard", "release", "snooze"])
def test_a_request_the_worker_never_saw_holds_back_every_way_to_run_again(db, clock, how):
    # A dead letter would run again at the first replay of the dead letters.
    queue = make(db, clock, max_attempts=1 if how == "fail-last" else 3)
    job = enqueue(queue)
    lease = queue.claim(QUEUE)
    assert queue.cancel(job, QUEUE, TENANT)
    if how in ("fail", "fail-last"):
        assert queue.fail(lease, Failure.HANDLER_FAILED, error=ValueError("x"))
    elif how == "discard":
        assert queue.fail(lease, Failure.DISCARDED, error=ValueError("x"))
    elif how == "release":
        assert queue.release(lease)
    else:
        assert queue.snooze(lease, timedelta(seconds=1))
    assert state(queue, job) is JobState.CANCELLED
    clock.advance(timedelta(minutes=10))
    assert queue.claim(QUEUE) is None


def test_end_cancelled_is_fenced_by_the_lease_and_needs_a_request(db, clock):
    queue = make(db, clock)
    job = enqueue(queue)
    lease = queue.claim(QUEUE)
    assert not queue.end_cancelled(lease)  # no request
    assert queue.cancel(job, QUEUE, TENANT)
    assert queue.end_cancelled(lease) and not queue.end_cancelled(lease)
    assert state(queue, job) is JobState.CANCELLED


def test_a_completion_before_the_request_was_seen_keeps_the_job_completed(db, clock):
    queue = make(db, clock)
    job = enqueue(queue)
    lease = queue.claim(QUEUE)
    assert queue.cancel(job, QUEUE, TENANT)
    assert queue.complete(lease)
    assert state(queue, job) is JobState.COMPLETED
    assert not queue.cancel(job, QUEUE, TENANT)


def test_a_cancelled_job_is_replayed_like_a_dead_letter(db, clock):
    queue = make(db, clock)
    job = enqueue(queue)
    lease = queue.claim(QUEUE)
    assert queue.cancel(job, QUEUE, TENANT)
    clock.advance(timedelta(seconds=11))
    assert queue.reclaim_expired(QUEUE) == 1
    assert state(queue, job) is JobState.CANCELLED
    assert queue.replay(job, QUEUE, TENANT)
    again = queue.claim(QUEUE)
    assert again.job_id == job and again.attempt == 1
    detail = QueueAdmin(db, clock=clock).job(job)
    assert detail.cancel_requested_at is None and detail.replay_count == 1
    assert queue.complete(again)
    other = enqueue(queue, 2)
    admin = QueueAdmin(db, clock=clock)
    assert admin.cancel(other)
    assert admin.replay_many(queue=QUEUE, state="cancelled") == 1
    assert state(queue, other) is JobState.PENDING
    del lease


def test_cancel_many_takes_pending_and_leased_jobs_matching_the_filters(db, clock):
    queue = make(db, clock)
    admin = QueueAdmin(db, clock=clock)
    jobs = [enqueue(queue, n) for n in range(4)]
    other = enqueue(queue, 9, queue_name=OTHER)
    leased = queue.claim(QUEUE)
    done = queue.claim(QUEUE)
    assert queue.complete(done)
    with pytest.raises(InvalidField) as info:
        admin.cancel_many()
    assert info.value.field == "everything"
    with pytest.raises(InvalidField) as info:
        admin.cancel_many(queue=QUEUE, state="completed")
    assert info.value.field == "state"
    assert admin.cancel_many(queue=QUEUE, dry_run=True) == 3
    assert admin.cancel_many(queue=QUEUE, state="leased") == 1
    assert admin.cancel_many(queue=QUEUE) == 3  # the leased one's request is kept
    states = {j: state(queue, j) for j in jobs}
    assert states[leased.job_id] is JobState.LEASED
    assert states[done.job_id] is JobState.COMPLETED
    assert sorted(s.value for j, s in states.items()
                  if j not in (leased.job_id, done.job_id)) == ["cancelled", "cancelled"]
    assert state(queue, other, queue_name=OTHER) is JobState.PENDING
    assert admin.job(leased.job_id).cancel_requested_at is not None


def test_unknown_and_finished_jobs_are_not_cancelled(db, clock):
    import uuid

    admin = QueueAdmin(db, clock=clock)
    assert not admin.cancel(uuid.uuid4())
    queue = make(db, clock)
    job = enqueue(queue)
    assert queue.complete(queue.claim(QUEUE))
    assert not admin.cancel(job)


def test_cancels_are_counted_by_the_queues_counters(db, clock):
    # "cancel_requested" (an operator's request) and "cancelled" (a job ended so) are
    # counters of their own; before, both names were dropped as unknown.
    from tests.worker.metrics import Metrics

    metrics = Metrics()
    queue = DatabaseQueue(db, registry, QueueOptions(lease_duration=timedelta(seconds=10)),
                          clock=clock, telemetry=metrics.telemetry)
    admin = QueueAdmin(db, clock=clock, telemetry=metrics.telemetry)
    waiting = enqueue(queue, 1)
    running = enqueue(queue, 2)
    assert admin.cancel(waiting)
    lease = queue.claim(QUEUE)
    assert lease is not None and lease.job_id == running
    assert admin.cancel(running)
    clock.advance(timedelta(seconds=11))  # its lease runs out with the request on it
    assert queue.claim(QUEUE) is None
    assert state(queue, running) is JobState.CANCELLED
    totals = metrics.totals()
    assert totals[("cancel_requested", None)] == 2
    assert totals[("cancelled", None)] >= 1
