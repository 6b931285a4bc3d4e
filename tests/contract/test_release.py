"""queue.release(lease): an owned job goes back to PENDING with its attempt given back,
its due time and last failure unchanged; a stale lease gives False and changes nothing.
queue.snooze(lease, delay) likewise with a new due time. Every database."""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest
from freezegun import freeze_time

from caravel_lite import DatabaseQueue, Dispatch, Failure, JobRegistry, JobState, QueueOptions
from caravel_lite.errors import InvalidField
from tests.worker.metrics import Metrics

QUEUE = "release"
TENANT = "tenant-a"
START = datetime(2031, 5, 1, 12, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Item:
    n: int


def _queue(db, metrics: Metrics) -> DatabaseQueue:
    registry = JobRegistry()
    registry.register("tests.item.v1", Item, lambda job, ctx: None)
    return DatabaseQueue(db, registry, QueueOptions(lease_duration=timedelta(seconds=30),
                                                    retry_delay=timedelta(seconds=2)),
                         telemetry=metrics.telemetry)


def _row(db, job_id):
    return db.execute_sql(
        f"SELECT state, attempts, available_at, last_failure, lease_token, lease_expires_at "
        f"FROM caravel_jobs WHERE id = {db.param}", (str(job_id),)).fetchone()


def test_release_gives_the_attempt_back_and_keeps_due_time_and_failure(db):
    metrics = Metrics()
    with freeze_time(START, tick=False) as frozen:
        queue = _queue(db, metrics)
        job_id = queue.enqueue(Item(1), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
        first = queue.claim(QUEUE)
        assert queue.fail(first, Failure.HANDLER_FAILED)
        frozen.tick(timedelta(seconds=5))
        lease = queue.claim(QUEUE)
        assert lease is not None and lease.attempt == 2
        before = queue.status(job_id, QUEUE, TENANT)
        assert queue.release(lease) is True
        found = queue.status(job_id, QUEUE, TENANT)
        assert (found.state, found.attempts, found.last_failure) == (
            JobState.PENDING, 1, Failure.HANDLER_FAILED)
        assert found.available_at == before.available_at == START + timedelta(seconds=2)
        assert _row(db, job_id)[4:] == (None, None)
        again = queue.claim(QUEUE)  # claimable at once, as the attempt it was
        assert again is not None and again.attempt == 2
    assert metrics.totals()[("released", None)] == 1


def test_release_of_a_stale_lease_is_false_and_changes_nothing(db):
    metrics = Metrics()
    with freeze_time(START, tick=False) as frozen:
        queue = _queue(db, metrics)
        job_id = queue.enqueue(Item(1), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
        stale = queue.claim(QUEUE)
        frozen.tick(timedelta(seconds=31))  # expired: another worker takes it over
        current = queue.claim(QUEUE)
        assert current is not None and current.attempt == 2
        before = _row(db, job_id)
        assert queue.release(stale) is False
        assert queue.snooze(stale, timedelta(seconds=1)) is False
        assert _row(db, job_id) == before
        assert queue.complete(current) is True
        assert queue.release(current) is False  # completed: not owned any more
        assert _row(db, job_id)[0] == JobState.COMPLETED.value
    assert metrics.totals()[("released", None)] == 0


def test_snooze_sets_the_due_time_and_gives_the_attempt_back(db):
    metrics = Metrics()
    with freeze_time(START, tick=False):
        queue = _queue(db, metrics)
        job_id = queue.enqueue(Item(1), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
        lease = queue.claim(QUEUE)
        assert queue.snooze(lease, timedelta(seconds=7, microseconds=1)) is True
        found = queue.status(job_id, QUEUE, TENANT)
        assert (found.state, found.attempts, found.last_failure) == (JobState.PENDING, 0, None)
        # Rounded up to the millisecond: never due early.
        assert found.available_at == START + timedelta(seconds=7, milliseconds=1)
        assert queue.claim(QUEUE) is None
    assert metrics.totals()[("snoozed", None)] == 1


def test_release_and_snooze_check_their_arguments(db):
    queue = _queue(db, Metrics())
    with pytest.raises(InvalidField, match="lease"):
        queue.release("not a lease")
    queue.enqueue(Item(1), Dispatch(queue=QUEUE, tenant_id=TENANT))
    lease = queue.claim(QUEUE)
    with pytest.raises(InvalidField, match="delay"):
        queue.snooze(lease, -timedelta(seconds=1))
    assert queue.release(lease) is True


def test_release_claim_hands_back_what_a_claim_under_its_token_leased(db):
    from caravel_lite.queue import new_claim_token

    metrics = Metrics()
    queue = _queue(db, metrics)
    ids = [queue.enqueue(Item(n), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
           for n in range(4)]
    token, other = new_claim_token(), new_claim_token()
    mine = queue.claim_batch(QUEUE, 3, token=token).leases
    theirs = queue.claim_batch(QUEUE, 1, token=other).leases
    assert [lease._token for lease in mine] == [token] * 3 and len(theirs) == 1
    # The caller never got `mine` (an interrupt after the commit): by the token alone.
    assert queue.release_claim(QUEUE, token) == 3
    assert queue.release_claim(QUEUE, token) == 0  # repeated: nothing more
    for lease in mine:
        assert _row(db, lease.job_id)[:2] == (JobState.PENDING.value, 0)
    assert _row(db, theirs[0].job_id)[:2] == (JobState.LEASED.value, 1)  # another claim's
    assert sorted(str(i) for i in ids) == sorted(str(x.job_id) for x in (*mine, *theirs))
    with pytest.raises(InvalidField, match="token"):
        queue.claim_batch(QUEUE, 1, token="not-a-token")
