"""Dispatch(idempotency_key=K, unique_for=period): the key deduplicates only against
jobs enqueued within the same period (periods of that length counted from the Unix
epoch); nothing is pruned, and without unique_for the key's rule is today's."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from freezegun import freeze_time

from caravel_lite import InvalidField, QueueIdempotencyConflict
from tests.workflows.jobs import Step, count, make_queue, to

HOUR = timedelta(hours=1)
# The last microsecond of one hour-long period, and the first of the next.
BOUNDARY = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)


def test_a_key_deduplicates_within_its_period_and_not_across_the_boundary(db):
    queue = make_queue(db)
    with freeze_time(BOUNDARY - timedelta(minutes=59), tick=False) as frozen:
        first = queue.enqueue(Step("a"), to(idempotency_key="k", unique_for=HOUR))
        frozen.move_to(BOUNDARY - timedelta(microseconds=1))
        same = queue.enqueue(Step("a"), to(idempotency_key="k", unique_for=HOUR))
        assert (same.job_id, same.already_enqueued) == (first.job_id, True)
        frozen.move_to(BOUNDARY)
        second = queue.enqueue(Step("a"), to(idempotency_key="k", unique_for=HOUR))
        assert second.job_id != first.job_id and not second.already_enqueued
        # the new period's job is now the one the key answers, in any state
        frozen.move_to(BOUNDARY + timedelta(minutes=59))
        again = queue.enqueue(Step("a"), to(idempotency_key="k", unique_for=HOUR))
        assert (again.job_id, again.already_enqueued) == (second.job_id, True)
    assert count(db) == 2  # nothing pruned


def test_within_a_period_a_different_payload_is_a_conflict_and_across_it_is_not(db):
    queue = make_queue(db)
    with freeze_time(BOUNDARY - timedelta(seconds=1), tick=False) as frozen:
        queue.enqueue(Step("a"), to(idempotency_key="k", unique_for=HOUR))
        with pytest.raises(QueueIdempotencyConflict):
            queue.enqueue(Step("b"), to(idempotency_key="k", unique_for=HOUR))
        frozen.move_to(BOUNDARY)
        assert not queue.enqueue(Step("b"), to(idempotency_key="k",
                                               unique_for=HOUR)).already_enqueued


def test_a_scoped_key_never_meets_the_same_key_unscoped_or_of_another_period(db):
    queue = make_queue(db)
    with freeze_time(BOUNDARY, tick=False):
        plain = queue.enqueue(Step("a"), to(idempotency_key="k"))
        hourly = queue.enqueue(Step("a"), to(idempotency_key="k", unique_for=HOUR))
        daily = queue.enqueue(Step("a"), to(idempotency_key="k",
                                            unique_for=timedelta(days=1)))
    assert len({plain.job_id, hourly.job_id, daily.job_id}) == 3
    assert not any(r.already_enqueued for r in (plain, hourly, daily))
    # without unique_for the key still answers its first job, at any later time
    with freeze_time(BOUNDARY + timedelta(days=400), tick=False):
        assert queue.enqueue(Step("a"), to(idempotency_key="k")).job_id == plain.job_id


@pytest.mark.parametrize("dispatch, field", [
    (dict(unique_for=HOUR), "unique_for"),
    (dict(idempotency_key="k", unique_for=3600), "unique_for"),
    (dict(idempotency_key="k", unique_for=timedelta(0)), "unique_for"),
    (dict(idempotency_key="k", unique_for=timedelta(days=400)), "unique_for"),
])
def test_bad_unique_for_is_refused_naming_the_field_and_writes_nothing(db, dispatch, field):
    queue = make_queue(db)
    with pytest.raises(InvalidField) as raised:
        queue.enqueue(Step("a"), to(**dispatch))
    assert raised.value.field == field
    assert count(db) == 0
