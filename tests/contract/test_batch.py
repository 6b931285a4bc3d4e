"""Batch operations (issue #6): claim_many, complete_many and enqueue_many keep every
guarantee of their one-job forms (SPEC §3-§6), on every database."""
from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import timedelta
from typing import Any, List

import pytest

from caravel_lite import (Failure, JobState, Priority, QueueIdempotencyConflict,
                          open_database)
from caravel_lite.dialect import ClaimMethod
from caravel_lite.testing import ManualClock
from tests.contract import procs
from tests.contract.jobs import (QUEUE, TENANT, Blob, Ping, dispatch, make_queue, row,
                                 row_count)

TIMEOUT = procs.TIMEOUT

# Every test here runs through the native claim and through the portable one
# (tests/contract/conftest.py).
pytestmark = pytest.mark.usefixtures("claim_path")


# -- claim_many ---------------------------------------------------------------------------

def test_claim_many_takes_the_best_due_jobs_in_claim_order(db):
    clock = ManualClock()
    queue = make_queue(db, clock)
    low = queue.enqueue(Ping(1), dispatch(priority=Priority.LOW)).job_id
    normal = [queue.enqueue(Ping(i), dispatch()).job_id for i in range(3)]
    critical = queue.enqueue(Ping(9), dispatch(priority=Priority.CRITICAL)).job_id
    later = queue.enqueue(Ping(5), dispatch(not_before=clock() + timedelta(minutes=1))).job_id
    leases = queue.claim_many(QUEUE, 4)
    assert [lease.job_id for lease in leases] == [critical] + normal
    assert all(lease.attempt == 1 and lease.context.attempt == 1 for lease in leases)
    assert len({lease.expires_at for lease in leases}) == 1
    rest = queue.claim_many(QUEUE, 10)
    assert [lease.job_id for lease in rest] == [low]  # the delayed job is not due
    assert queue.claim_many(QUEUE, 10) == []
    assert queue.status(later, QUEUE, TENANT).state is JobState.PENDING
    for lease in leases + rest:
        assert queue.status(lease.job_id, QUEUE, TENANT).state is JobState.LEASED


@pytest.mark.parametrize("limit", [0, 1001, True, "2", None])
def test_claim_many_rejects_a_bad_limit(db, limit):
    with pytest.raises(ValueError, match="limit"):
        make_queue(db).claim_many(QUEUE, limit)


def test_claim_many_sweeps_expired_leases_first(db):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=1)
    again = make_queue(db, clock, max_attempts=2)
    exhausted = queue.enqueue(Ping(1), dispatch()).job_id
    retryable = again.enqueue(Ping(2), dispatch(priority=Priority.HIGH)).job_id
    assert {lease.job_id for lease in queue.claim_many(QUEUE, 5)} == {exhausted, retryable}
    fresh = queue.enqueue(Ping(3), dispatch()).job_id
    clock.advance(timedelta(minutes=6))  # past the 5 min default lease
    leases = queue.claim_many(QUEUE, 5)
    # The exhausted lease is dead-lettered before claiming; the other one is claimable
    # again (its higher priority puts it first) and this claim is its second attempt.
    assert [(lease.job_id, lease.attempt) for lease in leases] == [(retryable, 2), (fresh, 1)]
    dead = queue.status(exhausted, QUEUE, TENANT)
    assert (dead.state, dead.last_failure) == (JobState.DEAD_LETTER,
                                               Failure.ATTEMPTS_EXHAUSTED)


def test_claim_with_an_expired_lease_of_another_queue_is_not_held_back(db):
    clock = ManualClock()
    queue = make_queue(db, clock)
    queue.enqueue(Ping(1), dispatch(queue="elsewhere"))
    assert queue.claim("elsewhere") is not None
    clock.advance(timedelta(minutes=6))
    job_id = queue.enqueue(Ping(2), dispatch()).job_id
    assert [lease.job_id for lease in queue.claim_many(QUEUE, 3)] == [job_id]
    assert queue.counts("elsewhere").expired_leases == 1  # only its own queue is swept


def test_threads_claiming_batches_share_out_every_job_once(db, connect):
    queue = make_queue(db)
    ids = {queue.enqueue(Ping(i), dispatch()).job_id for i in range(40)}
    shared = make_queue(connect())
    taken: List[uuid.UUID] = []
    errors: List[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def claim() -> None:
        try:
            barrier.wait(TIMEOUT)
            for _ in range(20):
                leases = shared.claim_many(QUEUE, 3)
                with lock:
                    taken.extend(lease.job_id for lease in leases)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    shared.db.close()
    assert not errors, errors
    counted = Counter(taken)
    assert set(counted) <= ids and max(counted.values()) == 1
    for job_id in counted:
        assert queue.status(job_id, QUEUE, TENANT).attempts == 1


def _drain_in_batches(url: str, barrier: Any, results: Any) -> None:
    """Child process: claim_many + complete_many until nothing is ready."""
    procs.apply_claim_path()
    db = open_database(url)
    db.connect()
    done: List[str] = []
    try:
        queue = make_queue(db)
        barrier.wait(timeout=60)
        while True:
            leases = queue.claim_many(QUEUE, 7)
            if not leases:
                if queue.size(QUEUE) == 0:
                    break
                continue  # lost every race this round; jobs remain
            for lease, acknowledged in zip(leases, queue.complete_many(leases)):
                if acknowledged:
                    done.append(str(lease.job_id))
        results.put(done)
    finally:
        db.close()


@pytest.mark.slow
def test_processes_draining_in_batches_complete_each_job_exactly_once(db, db_url):
    queue = make_queue(db)
    ids = {str(r.job_id) for r in queue.enqueue_many([(Ping(i), dispatch())
                                                       for i in range(150)])}
    collected = procs.in_processes(3, _drain_in_batches, db_url)
    completed = Counter(job_id for done in collected for job_id in done)
    assert set(completed) == ids and max(completed.values()) == 1
    counts = queue.counts(QUEUE)
    assert (counts.completed, counts.ready, counts.active_leases) == (150, 0, 0)
    assert {queue.status(uuid.UUID(i), QUEUE, TENANT).attempts for i in ids} == {1}


# -- complete_many ------------------------------------------------------------------------

def test_complete_many_acknowledges_every_owned_lease(db):
    queue = make_queue(db)
    queue.enqueue_many([(Ping(i), dispatch()) for i in range(5)])
    leases = queue.claim_many(QUEUE, 5)
    assert queue.complete_many(leases) == [True] * 5
    for lease in leases:
        stored = row(db, lease.job_id)
        assert stored["state"] == JobState.COMPLETED.value
        assert stored["lease_token"] is None and stored["lease_expires_at"] is None
    assert queue.complete_many(leases) == [False] * 5  # already finished: stale
    assert queue.complete_many([]) == []


def test_a_stale_lease_in_a_batch_is_refused_and_does_not_block_the_others(db):
    clock = ManualClock()
    queue = make_queue(db, clock, lease_duration=timedelta(seconds=10))
    first = queue.enqueue(Ping(1), dispatch(priority=Priority.HIGH)).job_id
    queue.enqueue_many([(Ping(i), dispatch()) for i in range(2, 5)])
    old = queue.claim_many(QUEUE, 1)
    assert [lease.job_id for lease in old] == [first]
    clock.advance(timedelta(seconds=11))  # the first lease expires...
    current = queue.claim_many(QUEUE, 4)  # ...and is reclaimed with a new token
    assert current[0].job_id == first and current[0].attempt == 2
    batch = [current[1], old[0], current[2], current[0], current[3]]
    assert queue.complete_many(batch) == [True, False, True, True, True]
    assert queue.status(first, QUEUE, TENANT).state is JobState.COMPLETED


def test_complete_many_refuses_expired_and_failed_leases(db):
    clock = ManualClock()
    queue = make_queue(db, clock, lease_duration=timedelta(seconds=10))
    queue.enqueue_many([(Ping(i), dispatch()) for i in range(3)])
    leases = queue.claim_many(QUEUE, 3)
    assert queue.fail(leases[1], Failure.HANDLER_FAILED)
    assert queue.complete_many(leases) == [True, False, True]
    assert queue.status(leases[1].job_id, QUEUE, TENANT).state is JobState.PENDING
    queue.enqueue(Ping(7), dispatch())
    late = queue.claim_many(QUEUE, 5)
    clock.advance(timedelta(seconds=10))  # expiry == now: no longer owned
    assert queue.complete_many(late) == [False] * len(late)


def test_complete_many_with_a_lease_twice_acknowledges_it_once(db):
    queue = make_queue(db)
    queue.enqueue_many([(Ping(i), dispatch()) for i in range(2)])
    a, b = queue.claim_many(QUEUE, 2)
    assert queue.complete_many([a, b, a]) == [True, True, False]


def test_complete_many_splits_long_batches(db):
    queue = make_queue(db)
    queue.enqueue_many([(Ping(i), dispatch()) for i in range(230)])
    leases = queue.claim_many(QUEUE, 230)
    assert len(leases) == 230
    assert queue.complete_many(leases) == [True] * 230
    assert queue.counts(QUEUE).completed == 230


# -- enqueue_many -------------------------------------------------------------------------

def test_enqueue_many_writes_new_jobs_with_their_dispatch(db):
    clock = ManualClock()
    queue = make_queue(db, clock)
    due = clock() + timedelta(seconds=30)
    results = queue.enqueue_many([
        (Ping(1), dispatch()),
        (Blob("x"), dispatch("k-1", tenant="tenant-b", priority=Priority.HIGH)),
        (Ping(2), dispatch(not_before=due, queue="other")),
    ])
    assert [r.already_enqueued for r in results] == [False, False, False]
    assert len({r.job_id for r in results}) == 3
    blob = queue.status(results[1].job_id, QUEUE, "tenant-b")
    assert (blob.priority, blob.state, blob.attempts) == (Priority.HIGH, JobState.PENDING, 0)
    assert queue.status(results[2].job_id, "other", TENANT).available_at == due
    assert queue.enqueue_many([]) == []


def test_enqueue_many_keeps_idempotency_inside_the_batch_and_against_stored_jobs(db):
    queue = make_queue(db)
    stored = queue.enqueue(Ping(1), dispatch("key-1")).job_id
    results = queue.enqueue_many([
        (Ping(1), dispatch("key-1")),     # the stored job
        (Ping(2), dispatch("key-2")),     # new
        (Ping(2), dispatch("key-2")),     # the item before it
        (Ping(3), dispatch()),            # no key: always new
        (Ping(3), dispatch()),
        (Ping(2), dispatch("key-2", tenant="tenant-b")),  # another tenant: new
    ])
    assert results[0].job_id == stored and results[0].already_enqueued
    assert not results[1].already_enqueued
    assert results[2].job_id == results[1].job_id and results[2].already_enqueued
    assert not results[3].already_enqueued and not results[4].already_enqueued
    assert results[3].job_id != results[4].job_id
    assert not results[5].already_enqueued and results[5].job_id != results[1].job_id
    assert row_count(db) == 5
    again = queue.enqueue_many([(Ping(2), dispatch("key-2"))])
    assert again[0].job_id == results[1].job_id and again[0].already_enqueued


def test_a_conflict_with_a_stored_job_writes_nothing_of_the_batch(db):
    queue = make_queue(db)
    stored = queue.enqueue(Ping(1), dispatch("key-1")).job_id
    with pytest.raises(QueueIdempotencyConflict) as raised:
        queue.enqueue_many([(Ping(5), dispatch("fresh")), (Ping(6), dispatch()),
                            (Ping(2), dispatch("key-1"))])
    assert raised.value.existing_id == stored
    assert row_count(db) == 1


def test_a_conflict_inside_the_batch_writes_nothing(db):
    queue = make_queue(db)
    with pytest.raises(QueueIdempotencyConflict):
        queue.enqueue_many([(Ping(1), dispatch("key-1")), (Blob("1"), dispatch("key-1"))])
    assert row_count(db) == 0


def test_enqueue_many_validates_every_item_before_writing(db):
    queue = make_queue(db)
    with pytest.raises(ValueError, match="tenant_id"):
        queue.enqueue_many([(Ping(1), dispatch()), (Ping(2), dispatch(tenant=" "))])
    with pytest.raises(ValueError, match="items"):
        queue.enqueue_many([(Ping(1), dispatch()), Ping(2)])
    with pytest.raises(ValueError, match="items"):
        queue.enqueue_many(Ping(1))
    assert row_count(db) == 0


def test_enqueue_many_joins_the_callers_transaction(db):
    queue = make_queue(db)
    with db.atomic() as transaction:
        queue.enqueue_many([(Ping(i), dispatch()) for i in range(3)])
        transaction.rollback()
    assert row_count(db) == 0
    stored = queue.enqueue(Ping(1), dispatch("key-1")).job_id
    with db.atomic():
        with pytest.raises(QueueIdempotencyConflict):
            queue.enqueue_many([(Ping(2), dispatch("key-1"))])
        # the failed batch left the caller's transaction usable (a savepoint)
        results = queue.enqueue_many([(Ping(1), dispatch("key-1")), (Ping(3), dispatch())])
    assert results[0].job_id == stored and results[0].already_enqueued
    assert row_count(db) == 2


def test_enqueue_many_writes_large_batches(db):
    queue = make_queue(db)
    results = queue.enqueue_many([(Ping(i), dispatch(f"k{i}")) for i in range(450)])
    assert len({r.job_id for r in results}) == 450 and row_count(db) == 450
    again = queue.enqueue_many([(Ping(i), dispatch(f"k{i}")) for i in range(445, 455)])
    assert [r.already_enqueued for r in again] == [True] * 5 + [False] * 5
    assert row_count(db) == 455


# -- claim cost ---------------------------------------------------------------------------

def _scans_jobs_table(backend: str, plan_text: str) -> bool:
    lines = plan_text.splitlines()
    if backend == "sqlite":
        return any(line.startswith("SCAN caravel_jobs") for line in lines)
    if backend == "postgres":
        return any("Seq Scan on caravel_jobs" in line for line in lines)
    return any("'caravel_jobs'" in line and "'type': 'ALL'" in line for line in lines)


def test_the_claim_statement_reads_indexes_only(db, backend):
    """The statement a claim runs on this database (one UPDATE ... RETURNING, the
    SKIP LOCKED read, or the portable read of candidates plus an expired lease) never
    scans the table, so
    retained history does not slow it down; checked after history was analysed, and
    on SQLite also without statistics (as most SQLite files live: nothing analyses
    them, while PostgreSQL's autovacuum and InnoDB gather their own)."""
    from tests.contract.explain import ANALYZE, PLANS
    from tests.contract.test_claim_plan import _claim_index, _load_history

    queue = make_queue(db)
    queue.enqueue_many([(Ping(i), dispatch()) for i in range(300)])
    now_ms = queue._now_ms()
    for analysed in ((False, True) if backend == "sqlite" else (True,)):
        if analysed:
            _load_history(db, now_ms)
            db.execute_sql(ANALYZE[backend])
        method = queue.dialect.claim_method
        if method is ClaimMethod.RETURNING:
            sql = queue._batch.claim_returning(10)
            params = (QUEUE, now_ms, "token", now_ms + 1000, now_ms, now_ms, QUEUE, now_ms)
        elif method is ClaimMethod.LOCKED_READ:
            sql = queue._batch.claim_locked(10)
            params = (QUEUE, now_ms)
        else:
            sql = queue._batch.claim_read(10)
            params = (QUEUE, now_ms, QUEUE, now_ms)
        plan = PLANS[backend](db, sql, params)
        assert _claim_index(db) in plan.text, plan.text
        assert not _scans_jobs_table(backend, plan.text), plan.text
        if method is ClaimMethod.RETURNING:
            # the UPDATE finds the picked rows by primary key, not by a state index
            assert "(id=?)" in plan.text or "caravel_jobs_pkey" in plan.text, plan.text
    assert len(queue.claim_many(QUEUE, 1000)) == 300


def test_a_batched_acknowledgement_finds_its_rows_by_primary_key(db, backend):
    """On SQLite without statistics (the usual case: nothing analyses the file), the
    batch once walked every leased row of the state index. The servers plan with the
    statistics they gather themselves (on a table this small a scan is their right
    choice), so there only the outcome is checked."""
    from tests.contract.explain import PLANS

    queue = make_queue(db)
    queue.enqueue_many([(Ping(i), dispatch()) for i in range(300)])
    leases = queue.claim_many(QUEUE, 200)  # many leased rows: a state index is tempting
    now_ms = queue._now_ms()
    batch = leases[:50]
    params: List[Any] = [now_ms, now_ms, *(str(lease.job_id) for lease in batch), now_ms]
    for lease in batch:
        params += (str(lease.job_id), lease._token)
    if backend == "sqlite":
        plan = PLANS[backend](db, queue._batch.complete_many(50), params)
        # The table is keyed by id (WITHOUT ROWID, migration 0005): a key search.
        assert "USING PRIMARY KEY (id=?)" in plan.text, plan.text
        assert not plan.full_scan, plan.text
    assert queue.complete_many(leases) == [True] * 200
