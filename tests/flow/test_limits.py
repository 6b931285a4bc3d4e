"""Per-key concurrency limits and rate limits, under frozen time, on every database."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from freezegun import freeze_time

from caravel_lite import Dispatch, InvalidField, QueueOptions
from caravel_lite.limits import RateLimit
from tests.flow.jobs import QUEUE, Call, Export, Task, make_queue, registry, to

START = datetime(2030, 1, 1, tzinfo=timezone.utc)


def _attempts(queue, job_ids):
    return [queue.status(job_id, queue=QUEUE, tenant_id="t").attempts for job_id in job_ids]


def test_at_most_n_per_key_are_leased_and_the_others_wait_without_attempts(db):
    queue = make_queue(db, registry(concurrency_limit=2))
    exports = [queue.enqueue(Export(i), to("t", key="customer-1")).job_id for i in range(5)]
    other = queue.enqueue(Export(9), to("t", key="customer-2")).job_id
    task = queue.enqueue(Task(1), to("t")).job_id
    leases = queue.claim_many(QUEUE, 10)
    assert sorted(str(lease.job_id) for lease in leases) == sorted(
        str(job) for job in (exports[0], exports[1], other, task))
    assert queue.claim(QUEUE) is None
    assert _attempts(queue, exports[2:]) == [0, 0, 0]
    # A slot frees when a job ends: the next of the key starts, in claim order.
    assert queue.complete(next(lease for lease in leases if lease.job_id == exports[0]))
    assert queue.claim(QUEUE).job_id == exports[2]
    assert queue.claim(QUEUE) is None
    failed = next(lease for lease in leases if lease.job_id == exports[1])
    assert queue.release(failed)
    assert queue.claim(QUEUE).job_id == exports[1]  # handed back: first again, same slot


def test_limit_one_is_a_mutex_and_the_queue_limit_applies_to_untyped_keys(db):
    queue = make_queue(db, concurrency_limit=1)
    first = queue.enqueue(Task(1), to("t", key="k")).job_id
    queue.enqueue(Task(2), to("t", key="k"))
    assert queue.claim(QUEUE).job_id == first
    assert queue.claim(QUEUE) is None


def test_an_expired_lease_frees_its_slot_and_a_renewed_one_keeps_it(db):
    with freeze_time(START, tick=False) as frozen:
        queue = make_queue(db, registry(concurrency_limit=1))
        jobs = [queue.enqueue(Export(i), to("t", key="k")).job_id for i in range(2)]
        held = queue.claim(QUEUE)
        frozen.tick(timedelta(seconds=20))
        held = queue.renew(held)
        frozen.tick(timedelta(seconds=15))  # past the claim's expiry, not the renewal's
        assert queue.claim(QUEUE) is None
        frozen.tick(timedelta(seconds=16))  # the renewed lease expired too
        taken = queue.claim(QUEUE)
        assert taken is not None and taken.job_id == jobs[0] and taken.attempt == 2
        assert queue.claim(QUEUE) is None
        assert not queue.complete(held)


def test_a_key_needs_a_limit_and_is_validated(db):
    queue = make_queue(db)
    with pytest.raises(InvalidField) as info:
        queue.enqueue(Task(1), to("t", key="k"))
    assert info.value.field == "concurrency_key"
    with pytest.raises(InvalidField) as info:
        make_queue(db, registry(concurrency_limit=2)).enqueue(
            Export(1), Dispatch(queue=QUEUE, tenant_id="t", concurrency_key=" "))
    assert info.value.field == "concurrency_key"
    for bad in (0, 1001, True, "2"):
        with pytest.raises(InvalidField) as info:
            QueueOptions(concurrency_limit=bad)
        assert info.value.field == "concurrency_limit"
    for bad in ((0, timedelta(seconds=1)), (1, timedelta(0)), (1, 5), 3):
        with pytest.raises(InvalidField) as info:
            QueueOptions(rate_limit=bad)
        assert info.value.field == "rate_limit"
    with pytest.raises(InvalidField) as info:
        registry().register("flow.bad.v1", dict, None, concurrency_limit=0)  # type: ignore
    assert QueueOptions(rate_limit=(2, timedelta(seconds=1))).rate_limit == RateLimit(
        2, timedelta(seconds=1))


def test_a_queue_rate_limit_counts_starts_over_a_sliding_window(db):
    with freeze_time(START, tick=False) as frozen:
        queue = make_queue(db, rate_limit=(3, timedelta(seconds=10)))
        jobs = [queue.enqueue(Task(i), to("t")).job_id for i in range(10)]
        assert len(queue.claim_many(QUEUE, 10)) == 3  # a burst of N at once
        assert queue.claim(QUEUE) is None
        assert _attempts(queue, jobs[3:4]) == [0]
        frozen.tick(timedelta(seconds=4))
        assert queue.claim(QUEUE) is None
        frozen.tick(timedelta(seconds=6))  # the first three left the window
        assert queue.claim(QUEUE) is not None
        frozen.tick(timedelta(seconds=5))
        assert len(queue.claim_many(QUEUE, 10)) == 2  # one slot was taken 5 s ago
        frozen.tick(timedelta(seconds=5) - timedelta(milliseconds=1))
        assert queue.claim(QUEUE) is None  # 9.999 s after the last start
        frozen.tick(timedelta(milliseconds=1))
        assert queue.claim(QUEUE) is not None


def test_a_type_rate_limit_holds_back_only_that_type(db):
    with freeze_time(START, tick=False) as frozen:
        queue = make_queue(db, registry(rate_limit=(2, timedelta(seconds=1))))
        for i in range(4):
            queue.enqueue(Call(i), to("t"))
        tasks = {queue.enqueue(Task(i), to("t")).job_id for i in range(3)}
        names = [lease.wire_name for lease in queue.claim_many(QUEUE, 10)]
        assert sorted(names) == ["flow.call.v1"] * 2 + ["flow.task.v1"] * 3
        assert queue.claim(QUEUE) is None
        frozen.tick(timedelta(seconds=1))
        assert [lease.wire_name for lease in queue.claim_many(QUEUE, 10)] == ["flow.call.v1"] * 2



def test_a_queue_without_flow_control_writes_no_group(db):
    queue = make_queue(db)
    queue.enqueue(Task(1), to("t"))
    assert list(db.execute_sql("SELECT flow_group, concurrency_key FROM caravel_jobs")) \
        == [(None, None)]


def test_a_job_last_written_by_a_later_clock_keeps_the_slot_its_claim_took(db):
    # A claim dates its slots with its own clock; a job handed back by another process
    # (its clock ahead, or its write landing after this claim began) was written later
    # than that. The slot must not read as free between its take and the lease.
    at = {"a": START, "b": START, "c": START + timedelta(seconds=1, milliseconds=3)}
    reg = registry(concurrency_limit=1)
    qa, qb, qc = (make_queue(db, reg, clock=lambda name=name: at[name], fair_tenants=True)
                  for name in "abc")
    first = qa.enqueue(Export(1), to("x", key="k")).job_id
    qa.enqueue(Export(2), to("y", key="k"))
    lease = qc.claim(QUEUE)
    at["c"] += timedelta(milliseconds=2)
    assert lease.job_id == first and qc.release(lease)
    at["a"] = at["b"] = START + timedelta(seconds=1)
    qb._groups._cursor[QUEUE] = "x"  # B's rotation is past tenant x: B looks at y
    between = []
    take_all = qa._groups.slots.take_all

    def take_then_b_claims(*args, **kwargs):
        taken = take_all(*args, **kwargs)
        between.append(qb.claim(QUEUE))
        return taken

    qa._groups.slots.take_all = take_then_b_claims
    assert qa.claim(QUEUE).job_id == first
    assert between == [None]


def test_a_claim_that_loses_its_only_chosen_job_says_contended_and_hands_its_slot_back(db):
    """A queue with flow control chooses its jobs (and takes their slots) before the
    fenced UPDATE leases them; when another claimer leases every chosen job in
    between, the answer is empty and ``contended``, so the worker claims again at
    once instead of waiting a poll interval with due jobs left."""
    queue = make_queue(db, registry(concurrency_limit=1))
    first = queue.enqueue(Export(1), to("t", key="customer-1")).job_id
    second = queue.enqueue(Export(2), to("t", key="customer-1")).job_id
    slots = queue._groups.slots
    take_all = slots.take_all

    def taken_then_stolen(*args, **kwargs):
        taken = take_all(*args, **kwargs)
        db.execute_sql(f"UPDATE caravel_jobs SET state = 'leased', attempts = attempts + 1, "
                       f"lease_token = 'other', lease_expires_at = {db.param} "
                       f"WHERE id = {db.param}", (queue._now_ms() + 60_000, str(first)))
        slots.take_all = take_all  # only the first pick is stolen
        return taken

    slots.take_all = taken_then_stolen
    batch = queue.claim_batch(QUEUE, 1)
    assert batch.leases == () and batch.contended
    # its slot was handed back (the stolen lease took none): the key's one slot is free
    assert queue.claim(QUEUE).job_id == second
