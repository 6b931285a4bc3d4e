"""Millisecond rounding, lease expiry, backoff and renewal, driven through the queue's
*default* clock with freezegun (SPEC §1: the clock is the only source of "now").

Single-threaded on purpose: freezegun does not freeze time.time() in other threads."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from freezegun import freeze_time

from caravel_lite import Failure, JobState
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue, ms, row

# In the past on purpose: job ids take their leading bits from the wall clock, and a
# future frozen instant would pin later ids to it for the rest of the session.
T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
US = timedelta(microseconds=1)
MS = timedelta(milliseconds=1)


@pytest.fixture
def frozen():
    with freeze_time(T0, tick=False) as frozen_time:
        yield frozen_time


def test_not_before_is_rounded_up_to_the_millisecond(db, frozen):
    queue = make_queue(db)
    due = T0 + timedelta(milliseconds=10, microseconds=1)  # 10.001 ms -> 11 ms
    result = queue.enqueue(Ping(1), dispatch(not_before=due))
    assert queue.status(result.job_id, QUEUE, TENANT).available_at == T0 + 11 * MS
    assert row(db, result.job_id)["available_at"] == ms(T0) + 11
    frozen.move_to(due)
    assert queue.claim(QUEUE) is None
    frozen.move_to(T0 + 11 * MS - US)
    assert queue.claim(QUEUE) is None
    frozen.move_to(T0 + 11 * MS)
    assert queue.claim(QUEUE).job_id == result.job_id


def test_not_before_on_a_whole_millisecond_is_kept(db, frozen):
    queue = make_queue(db)
    due = T0 + 7 * MS
    result = queue.enqueue(Ping(1), dispatch(not_before=due))
    assert row(db, result.job_id)["available_at"] == ms(due)
    frozen.move_to(due - US)
    assert queue.claim(QUEUE) is None
    frozen.move_to(due)
    assert queue.claim(QUEUE).job_id == result.job_id


def test_not_before_in_another_timezone_is_the_same_instant(db, frozen):
    queue = make_queue(db)
    plus_two = timezone(timedelta(hours=2))
    due = (T0 + 5 * MS).astimezone(plus_two)
    result = queue.enqueue(Ping(1), dispatch(not_before=due))
    assert row(db, result.job_id)["available_at"] == ms(T0) + 5


def test_immediate_enqueue_is_due_at_floor_now(db, frozen):
    frozen.move_to(T0 + timedelta(microseconds=999))
    queue = make_queue(db)
    result = queue.enqueue(Ping(1), dispatch())
    assert row(db, result.job_id)["available_at"] == ms(T0)
    assert queue.claim(QUEUE).job_id == result.job_id  # due at once, same instant


def test_lease_expiry_equal_to_now_is_not_owned_and_is_claimable(db, frozen):
    frozen.move_to(T0 + timedelta(microseconds=400))
    queue = make_queue(db, lease_duration=timedelta(seconds=1))
    result = queue.enqueue(Ping(1), dispatch())
    lease = queue.claim(QUEUE)
    # expiry is rounded up: now + 1 s = T0 + 1000.4 ms -> 1001 ms
    assert lease.expires_at == T0 + 1001 * MS
    frozen.move_to(lease.expires_at - US)
    renewed = queue.renew(lease)  # still owned one microsecond before expiry
    assert renewed is not None and renewed.expires_at > lease.expires_at
    frozen.move_to(renewed.expires_at)
    before = row(db, result.job_id)
    assert queue.complete(renewed) is False
    assert queue.renew(renewed) is None
    assert queue.fail(renewed, Failure.HANDLER_FAILED) is False
    assert row(db, result.job_id) == before
    again = queue.claim(QUEUE)
    assert again is not None and again.attempt == 2
    assert queue.complete(renewed) is False
    assert queue.complete(again) is True


def test_backoff_doubles_from_five_seconds_up_to_the_cap(db, frozen):
    queue = make_queue(db, max_attempts=10)  # defaults: 5 s doubling, capped at 5 min
    result = queue.enqueue(Ping(1), dispatch())
    expected = [5, 10, 20, 40, 80, 160, 300, 300, 300]
    now = T0
    for attempt, seconds in enumerate(expected, start=1):
        lease = queue.claim(QUEUE)
        assert lease is not None and lease.attempt == attempt
        assert queue.fail(lease, Failure.HANDLER_FAILED)
        due = now + timedelta(seconds=seconds)
        status = queue.status(result.job_id, QUEUE, TENANT)
        assert status.state == JobState.PENDING and status.available_at == due
        frozen.move_to(due - US)
        assert queue.claim(QUEUE) is None
        frozen.move_to(due)
        now = due
    last = queue.claim(QUEUE)
    assert last.attempt == 10
    assert queue.fail(last, Failure.HANDLER_FAILED)
    status = queue.status(result.job_id, QUEUE, TENANT)
    assert status.state == JobState.DEAD_LETTER and status.attempts == 10
    assert status.last_failure == Failure.HANDLER_FAILED


@pytest.mark.parametrize("start_offset_us", [0, 1, 300, 999])
def test_retry_is_never_early_with_fractional_clocks_and_delays(db, frozen, start_offset_us):
    queue = make_queue(db, max_attempts=6, retry_delay=timedelta(microseconds=1500),
                       max_retry_delay=timedelta(microseconds=10_250))
    result = queue.enqueue(Ping(1), dispatch())
    now = T0 + timedelta(microseconds=start_offset_us)
    frozen.move_to(now)
    for attempt, delay_us in enumerate([1500, 3000, 6000, 10_250, 10_250], start=1):
        lease = queue.claim(QUEUE)
        assert lease is not None and lease.attempt == attempt
        assert queue.fail(lease, Failure.HANDLER_FAILED)
        exact = now + timedelta(microseconds=delay_us)
        available = queue.status(result.job_id, QUEUE, TENANT).available_at
        assert exact <= available < exact + MS  # rounded up, by less than a millisecond
        assert (available - T0) % MS == timedelta(0)
        frozen.move_to(available - US)
        assert queue.claim(QUEUE) is None
        # advance by a fraction of a millisecond past the due time for the next round
        now = available + timedelta(microseconds=(attempt * 137) % 1000)
        frozen.move_to(now)


def test_renewal_is_bounded_by_max_lease_lifetime(db, frozen):
    queue = make_queue(db, lease_duration=timedelta(seconds=60),
                       max_lease_lifetime=timedelta(seconds=90))
    result = queue.enqueue(Ping(1), dispatch())
    lease = queue.claim(QUEUE)
    assert lease.expires_at == T0 + timedelta(seconds=60)
    frozen.move_to(T0 + timedelta(seconds=10))
    lease = queue.renew(lease)
    assert lease.expires_at == T0 + timedelta(seconds=70)
    frozen.move_to(T0 + timedelta(seconds=50))
    lease = queue.renew(lease)
    assert lease.expires_at == T0 + timedelta(seconds=90)  # capped by the lifetime
    frozen.move_to(T0 + timedelta(seconds=89, microseconds=999_999))
    lease = queue.renew(lease)  # same expiry again: still a success
    assert lease is not None and lease.expires_at == T0 + timedelta(seconds=90)
    frozen.move_to(T0 + timedelta(seconds=90))
    before = row(db, result.job_id)
    assert queue.renew(lease) is None
    assert row(db, result.job_id) == before
    assert queue.status(result.job_id, QUEUE, TENANT).attempts == 1  # renewals are free


def test_renewal_with_an_equal_expiry_succeeds(db, frozen):
    """MariaDB reports *changed* rows unless told otherwise; an UPDATE that writes the
    same expiry must still count as a successful renewal."""
    queue = make_queue(db, lease_duration=timedelta(seconds=30))
    result = queue.enqueue(Ping(1), dispatch())
    lease = queue.claim(QUEUE)
    first = queue.renew(lease)  # same instant as the claim: same expiry
    assert first is not None and first.expires_at == lease.expires_at
    second = queue.renew(first)
    assert second is not None and second.expires_at == lease.expires_at
    assert row(db, result.job_id)["lease_expires_at"] == ms(lease.expires_at)
    assert queue.complete(second) is True


def test_renewal_never_shortens_a_lease(db, frozen):
    long = make_queue(db, lease_duration=timedelta(minutes=10))
    short = make_queue(db, lease_duration=timedelta(seconds=5))
    result = long.enqueue(Ping(1), dispatch())
    lease = long.claim(QUEUE)
    frozen.move_to(T0 + timedelta(seconds=1))
    renewed = short.renew(lease)
    assert renewed is None or renewed.expires_at >= lease.expires_at
    assert row(db, result.job_id)["lease_expires_at"] == ms(lease.expires_at)


def test_renewal_never_revives_a_stale_lease(db, frozen):
    queue = make_queue(db, lease_duration=timedelta(seconds=10))
    result = queue.enqueue(Ping(1), dispatch())
    lease = queue.claim(QUEUE)
    frozen.move_to(lease.expires_at)
    assert queue.renew(lease) is None  # expired, not yet reclaimed
    new = queue.claim(QUEUE)
    before = row(db, result.job_id)
    assert queue.renew(lease) is None  # superseded
    assert row(db, result.job_id) == before
    assert queue.complete(new)
    assert queue.renew(new) is None  # finished


def test_status_times_are_aware_utc(db, frozen):
    queue = make_queue(db)
    result = queue.enqueue(Ping(1), dispatch())
    available = queue.status(result.job_id, QUEUE, TENANT).available_at
    assert available == T0 and available.utcoffset() == timedelta(0)
    assert queue.counts(QUEUE).observed_at == T0
