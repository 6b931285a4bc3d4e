"""queue.enqueue_batch: when every job is final exactly one on_complete runs,
on_success only if all completed, on_failure once at the first final failure; each
decided in the transaction of the deciding transition. A replayed member is not
counted again, and a closed batch never reopens."""
from __future__ import annotations

from datetime import timedelta

import pytest

from caravel_lite import Failure, InvalidField, QueueAdmin
from caravel_lite.testing import ManualClock, drain
from tests.workflows import jobs
from tests.workflows.jobs import (QUEUE, TENANT, Flaky, Step, count, make_queue, state_of,
                                  to, workflow_rows)


@pytest.fixture(autouse=True)
def _fresh_records():
    jobs.RAN.clear()
    jobs.FAILING.clear()


def claim_named(queue, name):
    """Claim the pending jobs and keep the one named ``name`` (the others handed back)."""
    leases = queue.claim_many(QUEUE, 100)
    (chosen,) = [lease for lease in leases if jobs.codec_name(lease) == name]
    for lease in leases:
        if lease is not chosen:
            assert queue.release(lease)
    return chosen


def callbacks():
    return dict(on_complete=(Step("complete"), to()), on_success=(Step("success"), to()),
                on_failure=(Step("failure"), to()))


def test_all_completed_runs_on_complete_and_on_success_once(db):
    queue = make_queue(db)
    batch = queue.enqueue_batch([(Step(f"m{n}"), to()) for n in range(5)], **callbacks())
    assert [state_of(db, i) for i in (batch.on_complete, batch.on_success,
                                      batch.on_failure)] == ["held"] * 3
    drain(queue, QUEUE)
    assert sorted(jobs.RAN) == sorted([f"m{n}" for n in range(5)] + ["complete", "success"])
    assert jobs.RAN[-2:] in (["complete", "success"], ["success", "complete"])
    assert state_of(db, batch.on_failure) == "cancelled"
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert status.counts == {"completed": 5}
    assert (status.total, status.finished, status.failed) == (5, 5, 0)
    assert status.closed_at is not None


def test_a_failure_runs_on_failure_at_once_and_on_complete_at_the_end(db):
    queue = make_queue(db)
    jobs.FAILING.update({"m1", "m3"})
    batch = queue.enqueue_batch([(Flaky(f"m{n}"), to()) for n in range(5)], **callbacks())
    assert queue.fail(claim_named(queue, "m1"), Failure.DISCARDED)
    assert state_of(db, batch.on_failure) == "pending"  # at the first final failure
    assert state_of(db, batch.on_complete) == "held"
    drain(queue, QUEUE)
    assert jobs.RAN.count("failure") == 1 and jobs.RAN.count("complete") == 1
    assert "success" not in jobs.RAN
    assert state_of(db, batch.on_success) == "cancelled"
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert status.counts == {"completed": 3, "dead_letter": 2}
    assert (status.finished, status.failed) == (5, 2)


def test_a_replay_after_the_batch_closed_does_not_count_or_reopen_it(db):
    queue = make_queue(db)
    jobs.FAILING.add("m0")
    batch = queue.enqueue_batch([(Flaky("m0"), to()), (Flaky("m1"), to())], **callbacks())
    drain(queue, QUEUE)
    closed = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (closed.finished, closed.failed) == (2, 1) and closed.closed_at is not None
    jobs.FAILING.clear()
    assert QueueAdmin(db).replay(batch.job_ids[0])
    drain(queue, QUEUE)
    assert jobs.RAN.count("m0") == 1  # the replay ran the job ...
    after = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    # ... but the batch counted it once, at its first final state, and stays closed
    assert (after.finished, after.failed, after.closed_at) == (2, 1, closed.closed_at)
    assert after.counts == {"completed": 2}
    assert jobs.RAN.count("complete") == 1 and jobs.RAN.count("failure") == 1
    assert state_of(db, batch.on_success) == "cancelled"


def test_a_replay_before_the_batch_closed_does_not_count_twice(db):
    queue = make_queue(db)
    jobs.FAILING.add("m0")
    batch = queue.enqueue_batch([(Flaky("m0"), to()), (Flaky("m1"), to())], **callbacks())
    assert queue.fail(claim_named(queue, "m0"), Failure.DISCARDED)
    jobs.FAILING.clear()
    assert QueueAdmin(db).replay(batch.job_ids[0])
    assert queue.complete(claim_named(queue, "m0"))
    # m0 counted once (failed); m1 still open: the batch is not complete
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (status.finished, status.failed, status.closed_at) == (1, 1, None)
    assert state_of(db, batch.on_complete) == "held"
    drain(queue, QUEUE)
    assert queue.batch_status(batch.batch_id, QUEUE, TENANT).finished == 2
    assert jobs.RAN.count("complete") == 1


def test_cancelled_and_expired_members_count_as_failed(db):
    clock = ManualClock()
    queue = make_queue(db, clock=clock, max_attempts=1,
                       lease_duration=timedelta(seconds=30))
    batch = queue.enqueue_batch([(Step("a"), to()), (Step("b"), to())], **callbacks())
    assert queue.cancel(batch.job_ids[0], QUEUE, TENANT)
    assert state_of(db, batch.on_failure) == "pending"
    claim_named(queue, "b")
    clock.advance(timedelta(seconds=31))  # its worker vanished; no attempts left
    assert queue.reclaim_expired(QUEUE) == 1
    assert state_of(db, batch.job_ids[1]) == "dead_letter"
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (status.finished, status.failed) == (2, 2) and status.closed_at is not None
    assert state_of(db, batch.on_complete) == "pending"
    assert state_of(db, batch.on_success) == "cancelled"


def test_a_batch_in_a_rolled_back_transaction_leaves_nothing(db):
    queue = make_queue(db)
    with pytest.raises(RuntimeError):
        with db.atomic():
            queue.enqueue_batch([(Step("a"), to())], **callbacks())
            raise RuntimeError("roll back")
    assert count(db) == 0 and workflow_rows(db) == 0


def test_status_is_scoped_to_its_queue_and_tenant(db):
    queue = make_queue(db)
    batch = queue.enqueue_batch([(Step("a"), to())])
    assert queue.batch_status(batch.batch_id, QUEUE, "other") is None
    assert queue.batch_status(batch.batch_id, "elsewhere", TENANT) is None
    assert queue.chain_status(batch.batch_id, QUEUE, TENANT) is None
    assert queue.batch_status(batch.batch_id, QUEUE, TENANT).counts == {"pending": 1}


@pytest.mark.parametrize("items, extra, field", [
    ([], {}, "items"),
    ([(Step("a"), to(idempotency_key="k"))], {}, "items"),
    ([(Step("a"), to())], dict(on_complete=(Step("c"), to(tenant_id="t2"))), "items"),
    ([(Step("a"), to())], dict(on_success=Step("c")), "on_success"),
])
def test_bad_batches_are_refused_naming_the_field_and_write_nothing(db, items, extra, field):
    queue = make_queue(db)
    with pytest.raises(InvalidField) as raised:
        queue.enqueue_batch(items, **extra)
    assert raised.value.field == field
    assert count(db) == 0 and workflow_rows(db) == 0


def test_an_operators_cancel_and_discard_of_pending_members_count_in_the_batch(db):
    queue = make_queue(db)
    batch = queue.enqueue_batch([(Step("a"), to()), (Step("b"), to())], **callbacks())
    admin = QueueAdmin(db)
    assert admin.cancel(batch.job_ids[0])
    assert state_of(db, batch.on_failure) == "pending"
    assert admin.discard(batch.job_ids[1])
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (status.finished, status.failed) == (2, 2) and status.closed_at is not None
    assert status.counts == {"cancelled": 1, "dead_letter": 1}
    assert state_of(db, batch.on_complete) == "pending"
    # repeated: nothing counted twice
    assert not admin.discard(batch.job_ids[1])
    assert not admin.cancel(batch.job_ids[0])
    assert queue.batch_status(batch.batch_id, QUEUE, TENANT).finished == 2
