"""status, replay, counts, size, peek, queues, delete, reclaim_expired and prune
(SPEC §7), with exact tenant matching on every database."""
from __future__ import annotations

import threading
import uuid
from datetime import datetime, timedelta

import pytest

from caravel_lite import Failure, InvalidField, JobState, Priority, QueueCounts
from caravel_lite.testing import ManualClock
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue, row, row_count

NEAR_MISSES = ["TENANT-A", "Tenant-a", "tenant-a ", " tenant-a", "tenant-a\u00a0"]


def _dead_letter(queue, job=Ping(1), **kw):
    """Enqueue ``job`` and fail its only attempt (the queue has max_attempts=1)."""
    assert queue.options.max_attempts == 1
    result = queue.enqueue(job, dispatch(**kw))
    lease = queue.claim(QUEUE)
    assert lease.job_id == result.job_id
    assert queue.fail(lease, Failure.HANDLER_FAILED)
    return result.job_id


# -- status -----------------------------------------------------------------------------

def test_status_is_none_for_unknown_id_other_queue_or_other_tenant(db):
    queue = make_queue(db)
    job_id = queue.enqueue(Ping(1), dispatch()).job_id
    assert queue.status(job_id, QUEUE, TENANT).state == JobState.PENDING
    assert queue.status(str(job_id), QUEUE, TENANT).job_id == job_id
    assert queue.status(uuid.uuid4(), QUEUE, TENANT) is None
    assert queue.status(job_id, "other", TENANT) is None
    assert queue.status(job_id, QUEUE, "tenant-b") is None


@pytest.mark.parametrize("tenant", NEAR_MISSES)
def test_status_and_replay_need_the_exact_tenant(db, tenant):
    queue = make_queue(db, max_attempts=1)
    job_id = _dead_letter(queue)
    before = row(db, job_id)
    assert queue.status(job_id, QUEUE, tenant) is None
    assert queue.replay(job_id, QUEUE, tenant) is False
    assert queue.delete(job_id, QUEUE, tenant) is False
    counts = queue.counts(QUEUE, tenant_id=tenant)
    assert (counts.ready, counts.dead_letter, counts.completed) == (0, 0, 0)
    assert row(db, job_id) == before
    assert queue.status(job_id, QUEUE, TENANT).state == JobState.DEAD_LETTER


def test_status_with_a_blank_tenant_is_an_error(db):
    queue = make_queue(db)
    job_id = queue.enqueue(Ping(1), dispatch()).job_id
    with pytest.raises(InvalidField) as info:
        queue.status(job_id, QUEUE, " ")
    assert info.value.field == "tenant_id"
    with pytest.raises(InvalidField) as info:
        queue.status("not-a-uuid", QUEUE, TENANT)
    assert info.value.field == "job_id"


# -- replay ------------------------------------------------------------------------------

def test_replay_only_from_dead_letter(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=1)
    pending = queue.enqueue(Ping(1), dispatch()).job_id
    leased_job = queue.enqueue(Ping(2), dispatch(priority=Priority.HIGH)).job_id
    assert queue.claim(QUEUE).job_id == leased_job
    done = queue.enqueue(Ping(3), dispatch(priority=Priority.CRITICAL)).job_id
    assert queue.complete(queue.claim(QUEUE))
    for job_id in (pending, leased_job, done):
        before = row(db, job_id)
        assert queue.replay(job_id, QUEUE, TENANT) is False
        assert row(db, job_id) == before


def test_replay_resets_a_dead_letter_and_keeps_id_and_payload(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=1)
    job_id = _dead_letter(queue, Ping(42))
    payload = row(db, job_id)["payload"]
    clock.advance(timedelta(minutes=3, microseconds=500))
    assert queue.replay(job_id, QUEUE, TENANT) is True
    status = queue.status(job_id, QUEUE, TENANT)
    assert status.state == JobState.PENDING and status.attempts == 0
    assert status.last_failure is None and status.replay_count == 1
    assert status.available_at == clock() - timedelta(microseconds=500)  # floor(now)
    assert queue.replay(job_id, QUEUE, TENANT) is False  # no longer dead
    lease = queue.claim(QUEUE)
    assert lease.job_id == job_id and lease.attempt == 1 and lease.payload == payload
    assert queue.fail(lease, Failure.HANDLER_FAILED)
    assert queue.replay(job_id, QUEUE, TENANT) is True
    assert queue.status(job_id, QUEUE, TENANT).replay_count == 2


def test_concurrent_replays_exactly_one_wins(db, connect):
    queue = make_queue(db, max_attempts=1)
    job_id = _dead_letter(queue)
    contenders = [make_queue(connect(), max_attempts=1) for _ in range(4)]
    barrier = threading.Barrier(len(contenders))
    results = []

    def replay(q):
        barrier.wait(timeout=30)
        results.append(q.replay(job_id, QUEUE, TENANT))
        q.db.close()

    threads = [threading.Thread(target=replay, args=(q,)) for q in contenders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results) == [False, False, False, True]
    assert queue.status(job_id, QUEUE, TENANT).replay_count == 1


# -- counts, size, peek, queues ------------------------------------------------------------

def test_counts_one_per_category(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=1, lease_duration=timedelta(seconds=10))
    expired = queue.enqueue(Ping(1), dispatch()).job_id
    assert queue.claim(QUEUE).job_id == expired  # expires at +10 s
    clock.advance(timedelta(seconds=5))
    queue.enqueue(Ping(2), dispatch())
    assert queue.complete(queue.claim(QUEUE))
    queue.enqueue(Ping(3), dispatch())
    assert queue.fail(queue.claim(QUEUE), Failure.HANDLER_FAILED)  # dead letter
    active = queue.enqueue(Ping(4), dispatch()).job_id
    assert queue.claim(QUEUE).job_id == active  # expires at +15 s
    queue.enqueue(Ping(5), dispatch())  # ready
    queue.enqueue(Ping(6), dispatch(not_before=clock() + timedelta(hours=1)))  # delayed
    # another tenant's and another queue's jobs, to check the filters
    queue.enqueue(Ping(7), dispatch(tenant="tenant-b"))
    queue.enqueue(Ping(8), dispatch(queue="elsewhere"))
    clock.advance(timedelta(seconds=7))  # no claim after this: nothing is swept
    counts = queue.counts(QUEUE, tenant_id=TENANT)
    assert isinstance(counts, QueueCounts)
    assert counts == QueueCounts(clock(), ready=1, delayed=1, active_leases=1,
                                 expired_leases=1, dead_letter=1, completed=1)
    everyone = queue.counts(QUEUE)
    assert (everyone.ready, everyone.delayed, everyone.expired_leases) == (2, 1, 1)
    assert queue.counts(QUEUE, tenant_id="tenant-b") == QueueCounts(
        clock(), ready=1, delayed=0, active_leases=0, expired_leases=0, dead_letter=0,
        completed=0)
    assert queue.size(QUEUE) == 2
    assert queue.size("elsewhere") == 1
    assert queue.queues() == ["contract", "elsewhere"]


def test_peek_shows_the_next_claim_without_claiming(db):
    clock = ManualClock()
    queue = make_queue(db, clock)
    assert queue.peek(QUEUE) is None
    queue.enqueue(Ping(1), dispatch(priority=Priority.LOW))
    queue.enqueue(Ping(2), dispatch(not_before=clock() + timedelta(seconds=1),
                                    priority=Priority.CRITICAL))
    best = queue.enqueue(Ping(3), dispatch(priority=Priority.HIGH)).job_id
    peeked = queue.peek(QUEUE)
    assert peeked.job_id == best and peeked.priority == Priority.HIGH
    assert peeked.state == JobState.PENDING and peeked.attempts == 0
    assert peeked.tenant_id == TENANT and peeked.wire_name == "contract.ping.v1"
    assert not hasattr(peeked, "payload")
    assert queue.status(best, QUEUE, TENANT).attempts == 0
    assert queue.claim(QUEUE).job_id == best


def test_queues_lists_names_in_use(db):
    queue = make_queue(db)
    assert queue.queues() == []
    for name in ("b-queue", "a.queue", "b-queue"):
        queue.enqueue(Ping(1), dispatch(queue=name))
    assert queue.queues() == ["a.queue", "b-queue"]


# -- delete, reclaim, prune -----------------------------------------------------------------

def test_delete_not_while_leased_and_frees_the_key(db):
    queue = make_queue(db)
    job_id = queue.enqueue(Ping(1), dispatch("k")).job_id
    lease = queue.claim(QUEUE)
    assert queue.delete(job_id, QUEUE, TENANT) is False
    assert queue.status(job_id, QUEUE, TENANT).state == JobState.LEASED
    assert queue.complete(lease)
    assert queue.delete(job_id, "other", TENANT) is False
    assert queue.delete(job_id, QUEUE, TENANT) is True
    assert queue.status(job_id, QUEUE, TENANT) is None
    assert queue.delete(job_id, QUEUE, TENANT) is False
    again = queue.enqueue(Ping(2), dispatch("k"))
    assert again.already_enqueued is False and again.job_id != job_id


def test_reclaim_expired_sweeps_and_counts(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=2, lease_duration=timedelta(seconds=10))
    once = queue.enqueue(Ping(1), dispatch()).job_id
    twice = queue.enqueue(Ping(2), dispatch()).job_id
    assert queue.claim(QUEUE).job_id == once
    assert queue.claim(QUEUE).job_id == twice
    clock.advance(timedelta(seconds=10))
    assert queue.claim(QUEUE).job_id == once  # sweeps; `twice` is claimable too
    assert queue.claim(QUEUE).job_id == twice
    assert queue.reclaim_expired(QUEUE) == 0  # nothing expired yet
    clock.advance(timedelta(seconds=9))
    fresh = queue.enqueue(Ping(3), dispatch()).job_id
    lease = queue.claim(QUEUE)
    assert lease.job_id == fresh
    clock.advance(timedelta(seconds=1))  # once/twice expire at attempt 2; fresh lives
    assert queue.reclaim_expired("elsewhere") == 0
    assert queue.reclaim_expired(QUEUE) == 2
    for job_id in (once, twice):
        status = queue.status(job_id, QUEUE, TENANT)
        assert status.state == JobState.DEAD_LETTER
        assert status.last_failure == Failure.ATTEMPTS_EXHAUSTED
    clock.advance(timedelta(seconds=9))
    assert queue.reclaim_expired(QUEUE) == 1
    status = queue.status(fresh, QUEUE, TENANT)
    assert status.state == JobState.PENDING and status.last_failure == Failure.LEASE_EXPIRED
    assert status.attempts == 1
    assert queue.reclaim_expired(QUEUE) == 0
    assert queue.claim(QUEUE).attempt == 2


def test_prune_removes_old_finished_jobs_only_and_forgets_their_keys(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=1)
    done = queue.enqueue(Ping(1), dispatch("done")).job_id
    assert queue.complete(queue.claim(QUEUE))
    dead = _dead_letter(queue, Ping(2), key="dead")
    clock.advance(timedelta(days=2))
    recent = queue.enqueue(Ping(3), dispatch("recent")).job_id
    assert queue.complete(queue.claim(QUEUE))
    leased = queue.enqueue(Ping(4), dispatch("leased")).job_id
    assert queue.claim(QUEUE).job_id == leased
    pending = queue.enqueue(Ping(5), dispatch("pending")).job_id
    before = row_count(db)

    assert queue.prune(timedelta(days=1), states=[JobState.COMPLETED]) == 1
    assert queue.status(done, QUEUE, TENANT) is None
    assert queue.status(dead, QUEUE, TENANT).state == JobState.DEAD_LETTER
    assert queue.prune(clock() - timedelta(days=1)) == 1  # defaults: both finished states
    assert queue.status(dead, QUEUE, TENANT) is None
    assert row_count(db) == before - 2
    for job_id in (recent, leased, pending):
        assert queue.status(job_id, QUEUE, TENANT) is not None
    assert queue.prune(timedelta(0), states=[JobState.COMPLETED]) == 0  # finished == cutoff
    clock.advance(timedelta(milliseconds=1))
    assert queue.prune(timedelta(0)) == 1  # recent; pending and leased stay
    assert {queue.status(j, QUEUE, TENANT).state for j in (leased, pending)} == {
        JobState.LEASED, JobState.PENDING}
    # pruned keys are forgotten: the same key makes a new job
    again = queue.enqueue(Ping(1), dispatch("done"))
    assert again.already_enqueued is False and again.job_id != done
    with pytest.raises(InvalidField):
        queue.prune(timedelta(days=1), states=[JobState.PENDING])
    with pytest.raises(InvalidField):
        queue.prune(timedelta(days=-1))
    with pytest.raises(InvalidField):
        queue.prune(datetime(2030, 1, 1))  # naive


def test_prune_can_be_limited_to_one_queue(db):
    clock = ManualClock()
    queue = make_queue(db, clock)
    for name in (QUEUE, "elsewhere"):
        queue.enqueue(Ping(1), dispatch(queue=name))
        assert queue.complete(queue.claim(name))
    clock.advance(timedelta(seconds=1))
    assert queue.prune(timedelta(0), queue="elsewhere") == 1
    assert queue.queues() == [QUEUE]
