"""Claim order, leases, fencing of stale leases, completion and failure (SPEC §3, §5, §6).

Time is driven by a ManualClock here; tests/contract/test_time.py drives the default
clock with freezegun."""
from __future__ import annotations

from datetime import timedelta

import pytest

from caravel_lite import Failure, JobContext, JobState, Priority
from caravel_lite.testing import ManualClock
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue, row

# Every test here runs through the native claim and through the portable one
# (tests/contract/conftest.py).
pytestmark = pytest.mark.usefixtures("claim_path")


def _claim_all(queue, name=QUEUE):
    leases = []
    while True:
        lease = queue.claim(name)
        if lease is None:
            return leases
        leases.append(lease)


def test_claim_on_an_empty_queue_returns_none(db):
    assert make_queue(db).claim(QUEUE) is None


def test_lease_exposes_job_attempt_expiry_and_context(db):
    clock = ManualClock()
    queue = make_queue(db, clock, lease_duration=timedelta(seconds=30))
    result = queue.enqueue(Ping(5), dispatch("k", tenant="tenant-z"))
    lease = queue.claim(QUEUE)
    assert lease.job_id == result.job_id
    assert lease.attempt == 1
    assert lease.expires_at == clock() + timedelta(seconds=30)
    assert isinstance(lease.context, JobContext)
    assert (lease.context.job_id, lease.context.queue, lease.context.tenant_id,
            lease.context.attempt) == (result.job_id, QUEUE, "tenant-z", 1)
    assert not lease.context.cancelled.is_set()
    assert "token" not in repr(lease)
    status = queue.status(result.job_id, QUEUE, "tenant-z")
    assert status.state == JobState.LEASED and status.attempts == 1
    assert queue.claim(QUEUE) is None  # the only job is leased


def test_priority_order_then_due_time_then_enqueue_time(db):
    clock = ManualClock()
    queue = make_queue(db, clock)
    start = clock()
    names = {}
    # Enqueued in the reverse of the expected claim order.
    for priority in (Priority.LOW, Priority.NORMAL, Priority.HIGH, Priority.CRITICAL):
        names[queue.enqueue(Ping(1), dispatch(priority=priority)).job_id] = priority.name
        clock.advance(timedelta(milliseconds=1))
    # Same priority (NORMAL): the earlier due time first, whatever the enqueue order.
    late_due = queue.enqueue(Ping(2), dispatch(not_before=start + timedelta(milliseconds=2)))
    clock.advance(timedelta(milliseconds=1))
    early_due = queue.enqueue(Ping(3), dispatch(not_before=start + timedelta(milliseconds=1)))
    # Same priority and due time: the earlier enqueue first.
    due = start + timedelta(milliseconds=3)
    clock.advance(timedelta(milliseconds=1))
    first_in = queue.enqueue(Ping(4), dispatch(not_before=due))
    clock.advance(timedelta(milliseconds=1))
    second_in = queue.enqueue(Ping(5), dispatch(not_before=due))
    clock.advance(timedelta(seconds=1))
    order = [lease.job_id for lease in _claim_all(queue)]
    by_priority = [names[i] for i in order if i in names]
    assert by_priority == ["CRITICAL", "HIGH", "NORMAL", "LOW"]
    normal = [i for i in order if names.get(i) not in ("CRITICAL", "HIGH", "LOW")]
    # the NORMAL job enqueued first was due at `start`, before all the others
    assert normal[1:] == [early_due.job_id, late_due.job_id, first_in.job_id,
                          second_in.job_id]


def test_jobs_due_in_the_same_millisecond_come_out_in_a_stable_order(db):
    clock = ManualClock()  # never moves: every job has the same due and enqueue time
    queue = make_queue(db, clock)
    ids = [queue.enqueue(Ping(i), dispatch()).job_id for i in range(12)]
    peeked = queue.peek(QUEUE).job_id
    order = [lease.job_id for lease in _claim_all(queue)]
    assert order[0] == peeked
    assert sorted(order) == sorted(ids)
    # Deterministic: ids made in one process sort in creation order, and that is the
    # final tie-breaker.
    assert order == sorted(ids, key=lambda i: str(i)) == ids


def test_a_job_is_not_claimed_before_it_is_due(db):
    clock = ManualClock()
    queue = make_queue(db, clock)
    result = queue.enqueue(Ping(1), dispatch(not_before=clock() + timedelta(seconds=10)))
    assert queue.claim(QUEUE) is None
    clock.advance(timedelta(seconds=10) - timedelta(milliseconds=1))
    assert queue.claim(QUEUE) is None
    clock.advance(timedelta(milliseconds=1))
    assert queue.claim(QUEUE).job_id == result.job_id


def test_claims_only_from_the_named_queue(db):
    queue = make_queue(db)
    queue.enqueue(Ping(1), dispatch(queue="other-queue"))
    assert queue.claim(QUEUE) is None
    assert queue.claim("other-queue") is not None


# -- fencing ---------------------------------------------------------------------------

def test_superseded_lease_is_fenced(db):
    clock = ManualClock()
    queue = make_queue(db, clock, lease_duration=timedelta(seconds=30))
    result = queue.enqueue(Ping(1), dispatch())
    old = queue.claim(QUEUE)
    clock.advance(timedelta(seconds=30))
    new = queue.claim(QUEUE)
    assert new.job_id == old.job_id and new.attempt == 2
    before = row(db, result.job_id)
    assert queue.complete(old) is False
    assert queue.fail(old, Failure.HANDLER_FAILED) is False
    assert queue.renew(old) is None
    assert row(db, result.job_id) == before
    status = queue.status(result.job_id, QUEUE, TENANT)
    assert status.state == JobState.LEASED and status.attempts == 2
    assert queue.complete(new) is True
    assert queue.status(result.job_id, QUEUE, TENANT).state == JobState.COMPLETED


def test_finished_lease_is_fenced(db):
    queue = make_queue(db, max_attempts=1)
    done = queue.enqueue(Ping(1), dispatch())
    lease = queue.claim(QUEUE)
    assert queue.complete(lease) is True
    before = row(db, done.job_id)
    assert queue.complete(lease) is False
    assert queue.fail(lease, Failure.HANDLER_FAILED) is False
    assert queue.renew(lease) is None
    assert row(db, done.job_id) == before

    dead = queue.enqueue(Ping(2), dispatch())
    lease = queue.claim(QUEUE)
    assert queue.fail(lease, Failure.INVALID_PAYLOAD) is True
    before = row(db, dead.job_id)
    assert queue.fail(lease, Failure.HANDLER_FAILED) is False
    assert queue.complete(lease) is False
    assert queue.renew(lease) is None
    assert row(db, dead.job_id) == before
    status = queue.status(dead.job_id, QUEUE, TENANT)
    assert status.state == JobState.DEAD_LETTER
    assert status.last_failure == Failure.INVALID_PAYLOAD


def test_expired_lease_cannot_complete_even_before_anyone_reclaims_it(db):
    clock = ManualClock()
    queue = make_queue(db, clock, lease_duration=timedelta(seconds=5))
    result = queue.enqueue(Ping(1), dispatch())
    lease = queue.claim(QUEUE)
    clock.advance(timedelta(seconds=6))
    before = row(db, result.job_id)
    assert queue.complete(lease) is False
    assert queue.fail(lease, Failure.HANDLER_FAILED) is False
    assert queue.renew(lease) is None
    assert row(db, result.job_id) == before


def test_fail_with_attempts_left_goes_back_to_pending_with_backoff(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=2)
    result = queue.enqueue(Ping(1), dispatch())
    lease = queue.claim(QUEUE)
    assert queue.fail(lease, Failure.UNKNOWN_JOB_TYPE) is True
    status = queue.status(result.job_id, QUEUE, TENANT)
    assert status.state == JobState.PENDING
    assert status.last_failure == Failure.UNKNOWN_JOB_TYPE
    assert status.available_at == clock() + timedelta(seconds=5)
    stored = row(db, result.job_id)
    assert stored["lease_token"] is None and stored["lease_expires_at"] is None
    clock.advance(timedelta(seconds=5))
    second = queue.claim(QUEUE)
    assert second.attempt == 2
    assert queue.complete(second) is True
    status = queue.status(result.job_id, QUEUE, TENANT)
    assert status.state == JobState.COMPLETED and status.last_failure is None


def test_fail_rejects_a_bare_string_failure(db):
    queue = make_queue(db)
    queue.enqueue(Ping(1), dispatch())
    lease = queue.claim(QUEUE)
    with pytest.raises(ValueError):
        queue.fail(lease, "handler_failed")
    assert queue.status(lease.job_id, QUEUE, TENANT).state == JobState.LEASED


# -- expired leases ---------------------------------------------------------------------

def test_expired_lease_with_attempts_left_is_claimed_again(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=2, lease_duration=timedelta(seconds=10))
    result = queue.enqueue(Ping(1), dispatch())
    first = queue.claim(QUEUE)
    clock.advance(timedelta(seconds=9, microseconds=999_999))
    assert queue.claim(QUEUE) is None
    clock.advance(timedelta(microseconds=1))
    second = queue.claim(QUEUE)
    assert second.job_id == result.job_id and second.attempt == 2
    assert second.expires_at == first.expires_at + timedelta(seconds=10)


def test_expired_lease_with_attempts_used_up_is_dead_lettered_by_any_claim(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=1, lease_duration=timedelta(seconds=10))
    result = queue.enqueue(Ping(1), dispatch())
    assert queue.claim(QUEUE) is not None
    clock.advance(timedelta(seconds=10))
    # a claim on another queue does not touch it
    assert queue.claim("unrelated") is None
    assert queue.status(result.job_id, QUEUE, TENANT).state == JobState.LEASED
    assert queue.claim(QUEUE) is None
    status = queue.status(result.job_id, QUEUE, TENANT)
    assert status.state == JobState.DEAD_LETTER
    assert status.last_failure == Failure.ATTEMPTS_EXHAUSTED
    assert status.attempts == 1


@pytest.mark.parametrize("name", ["", "Bad", "a b", "q" * 65])
def test_queue_names_are_validated_on_every_entry_point(db, name):
    queue = make_queue(db)
    for call in (queue.claim, queue.size, queue.peek, queue.counts, queue.reclaim_expired):
        with pytest.raises(ValueError) as info:
            call(name)
        assert info.value.field == "queue"
