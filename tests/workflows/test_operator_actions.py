"""Every action that ends or removes a chain's or batch's job, in bulk or by deleting
it, does what the single-job discard and cancel do: a batch member is counted in its
batch exactly once (so the batch closes and its callbacks are decided), and a chain
step ended for good holds the steps after it, or, when it is removed before it
completed (deleted, or pruned as a dead letter), ends them CANCELLED as
``cancel_chain`` would, since no replay of it can resume them any more."""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, List

import pytest

from caravel_lite import QueueAdmin, QueueWorker
from caravel_lite.testing import ManualClock, drain
from tests.support import wait_for
from tests.workflows import jobs
from tests.workflows.jobs import QUEUE, TENANT, Flaky, Step, make_queue, state_of, to

CALLBACKS = "callbacks"  # callbacks wait on a queue of their own: no bulk action reaches them


@pytest.fixture(autouse=True)
def _fresh_records():
    jobs.RAN.clear()
    jobs.FAILING.clear()


def callbacks():
    return dict(on_complete=(Step("complete"), to(queue=CALLBACKS)),
                on_success=(Step("success"), to(queue=CALLBACKS)),
                on_failure=(Step("failure"), to(queue=CALLBACKS)))


def members(n: int, prefix: str = "m") -> List[Any]:
    return [(Step(f"{prefix}{k}"), to()) for k in range(n)]


def closed_failed(queue, batch, total: int, failed: int) -> None:
    """The batch counted every member once, ``failed`` of them failed, and closed with
    the callbacks that outcome decides."""
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (status.finished, status.failed) == (total, failed), status
    assert status.closed_at is not None
    assert state_of(queue.db, batch.on_complete) == "pending"
    assert state_of(queue.db, batch.on_failure) == ("pending" if failed else "cancelled")
    assert state_of(queue.db, batch.on_success) == ("cancelled" if failed else "pending")


# -- batches ---------------------------------------------------------------------------

def test_a_bulk_discard_of_pending_members_closes_the_batch(db):
    queue = make_queue(db)
    batch = queue.enqueue_batch(members(3), **callbacks())
    plain = queue.enqueue(Step("plain"), to()).job_id
    admin = QueueAdmin(db)
    assert admin.discard_many(queue=QUEUE) == 4
    closed_failed(queue, batch, 3, 3)
    assert state_of(db, plain) == "dead_letter"
    # repeated, in bulk or singly: nothing more to end, nothing counted twice
    assert admin.discard_many(queue=QUEUE) == 0
    assert not admin.discard(batch.job_ids[0])
    assert queue.batch_status(batch.batch_id, QUEUE, TENANT).finished == 3


def test_a_bulk_cancel_counts_pending_members_at_once_and_leased_ones_when_they_end(db):
    queue = make_queue(db)
    batch = queue.enqueue_batch(members(3), **callbacks())
    (lease,) = queue.claim_many(QUEUE, 1)
    admin = QueueAdmin(db)
    assert admin.cancel_many(queue=QUEUE) == 3  # two cancelled, one asked to stop
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (status.finished, status.failed, status.closed_at) == (2, 2, None)
    assert state_of(db, batch.on_failure) == "pending"
    assert state_of(db, batch.on_complete) == "held"
    assert queue.end_cancelled(lease)
    closed_failed(queue, batch, 3, 3)
    assert admin.cancel_many(queue=QUEUE) == 0


def test_a_filtered_bulk_discard_counts_the_members_it_matched_beside_the_others(db):
    queue = make_queue(db)
    batch = queue.enqueue_batch(members(2) + [(Flaky(f"f{k}"), to()) for k in range(3)],
                                **callbacks())
    admin = QueueAdmin(db)
    # the filter is checked again on each member's own statement
    assert admin.discard_many(queue=QUEUE, wire_name="workflows.flaky.v1") == 3
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (status.finished, status.failed, status.closed_at) == (3, 3, None)
    assert state_of(db, batch.on_failure) == "pending"
    drain(queue, QUEUE)
    assert sorted(jobs.RAN) == ["m0", "m1"]
    closed_failed(queue, batch, 5, 3)


@pytest.mark.parametrize("deleting", ["admin", "application"])
def test_deleting_a_pending_member_counts_it_failed_and_can_close_the_batch(db, deleting):
    queue = make_queue(db)
    batch = queue.enqueue_batch(members(2), **callbacks())
    (lease,) = queue.claim_many(QUEUE, 1)
    assert queue.complete(lease)
    (left,) = [job for job in batch.job_ids if job != lease.job_id]
    if deleting == "admin":
        assert QueueAdmin(db).delete(left)
    else:
        assert queue.delete(left, QUEUE, TENANT)
    assert state_of(db, left) is None
    closed_failed(queue, batch, 2, 1)


def test_deleting_a_member_counted_already_counts_nothing_more(db):
    queue = make_queue(db)
    batch = queue.enqueue_batch(members(2), **callbacks())
    admin = QueueAdmin(db)
    first, second = batch.job_ids
    assert admin.discard(first)
    assert admin.delete(first)
    assert admin.delete_many(queue=QUEUE, state="dead_letter") == 0
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (status.finished, status.failed, status.closed_at) == (1, 1, None)
    drain(queue, QUEUE)
    closed_failed(queue, batch, 2, 1)
    # a replayed member, pending again, was counted at its first end
    other = queue.enqueue_batch(members(2, "r"), **callbacks())
    assert admin.discard(other.job_ids[0]) and admin.replay(other.job_ids[0])
    assert admin.delete(other.job_ids[0])
    assert queue.batch_status(other.batch_id, QUEUE, TENANT).finished == 1


# -- chains ----------------------------------------------------------------------------

def test_a_bulk_discard_or_cancel_of_a_pending_step_holds_the_rest_until_a_replay(db):
    queue = make_queue(db)
    admin = QueueAdmin(db)
    discarded = queue.enqueue_chain([(Step("a"), to()), (Step("b"), to())])
    assert admin.discard_many(queue=QUEUE) == 1
    cancelled = queue.enqueue_chain([(Step("c"), to()), (Step("d"), to())])
    assert admin.cancel_many(queue=QUEUE) == 1
    assert [state_of(db, i) for i in discarded.job_ids + cancelled.job_ids] == [
        "dead_letter", "held", "cancelled", "held"]
    assert admin.replay(discarded.job_ids[0]) and admin.replay(cancelled.job_ids[0])
    drain(queue, QUEUE)
    assert sorted(jobs.RAN) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("which", [1, 2])  # the pending step, or the held one after it
def test_deleting_a_step_before_it_completed_cancels_the_held_steps_after_it(db, which):
    queue = make_queue(db)
    chain = queue.enqueue_chain([(Step(f"s{n}"), to()) for n in range(4)])
    drain(queue, QUEUE, max_jobs=1)
    assert [state_of(db, i) for i in chain.job_ids] == ["completed", "pending", "held",
                                                        "held"]
    assert QueueAdmin(db).delete(chain.job_ids[which])
    after = ["cancelled"] * (3 - which)
    assert [state_of(db, i) for i in chain.job_ids[which + 1:]] == after
    drain(queue, QUEUE)
    assert jobs.RAN == ["s0"] + (["s1"] if which == 2 else [])
    assert queue.counts(QUEUE, TENANT).held == 0


def test_deleting_a_completed_step_leaves_the_rest_of_the_chain_running(db):
    queue = make_queue(db)
    chain = queue.enqueue_chain([(Step(f"s{n}"), to()) for n in range(3)])
    drain(queue, QUEUE, max_jobs=1)
    assert QueueAdmin(db).delete(chain.job_ids[0])
    drain(queue, QUEUE)
    assert jobs.RAN == ["s0", "s1", "s2"]


@pytest.mark.parametrize("removing", ["delete_many", "prune", "application_prune"])
def test_removing_a_dead_lettered_step_cancels_the_held_steps_after_it(db, removing):
    clock = ManualClock()
    queue = make_queue(db, clock=clock)
    admin = QueueAdmin(db, clock=clock)
    jobs.FAILING.add("b")
    chain = queue.enqueue_chain([(Flaky("a"), to()), (Flaky("b"), to()), (Flaky("c"), to()),
                                 (Flaky("d"), to())])
    drain(queue, QUEUE)
    assert [state_of(db, i) for i in chain.job_ids] == ["completed", "dead_letter", "held",
                                                        "held"]
    clock.advance(timedelta(hours=2))
    if removing == "delete_many":
        assert admin.delete_many(queue=QUEUE) == 1
        assert state_of(db, chain.job_ids[0]) == "completed"
    elif removing == "prune":
        assert admin.prune(timedelta(hours=1)) == 2
    else:
        assert queue.prune(timedelta(hours=1)) == 2
    assert state_of(db, chain.job_ids[1]) is None
    assert [state_of(db, i) for i in chain.job_ids[2:]] == ["cancelled", "cancelled"]
    assert queue.counts(QUEUE, TENANT).held == 0


# -- races -----------------------------------------------------------------------------

def test_operators_ending_the_same_members_at_once_count_each_once(db, connect):
    queue = make_queue(db)
    batch = queue.enqueue_batch(members(200), **callbacks())
    ids = list(batch.job_ids)
    barrier = threading.Barrier(3)
    ended: List[int] = []
    errors: List[BaseException] = []

    def operator(act) -> None:
        own = connect()
        try:
            admin = QueueAdmin(own)
            barrier.wait(timeout=30)
            ended.append(act(admin))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            own.close()

    actions = [lambda admin: admin.discard_many(queue=QUEUE),
               lambda admin: admin.cancel_many(queue=QUEUE, state="pending"),
               lambda admin: sum(admin.cancel(ident) for ident in reversed(ids))]
    threads = [threading.Thread(target=operator, args=(act,)) for act in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sum(ended) == 200, ended  # each member ended by exactly one of them
    closed_failed(queue, batch, 200, 200)


def test_a_bulk_discard_racing_a_worker_counts_each_member_once(db, connect):
    queue = make_queue(db)
    batch = queue.enqueue_batch(members(300), **callbacks())
    stop = threading.Event()
    errors: List[BaseException] = []

    def work() -> None:
        own = connect()
        worker = QueueWorker(make_queue(own))
        try:
            while not stop.is_set():
                if worker.run_once(QUEUE):
                    # a handler's work: without it a worker claiming back to back on
                    # SQLite holds the write lock for as long as it has jobs
                    stop.wait(0.002)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            worker.close()
            own.close()

    thread = threading.Thread(target=work)
    thread.start()
    try:
        wait_for(lambda: queue.batch_status(batch.batch_id, QUEUE, TENANT).finished > 0,
                 timeout=60, message="the worker's first completion")
        discarded = QueueAdmin(db).discard_many(queue=QUEUE)
        wait_for(lambda: queue.batch_status(batch.batch_id, QUEUE, TENANT).closed_at,
                 timeout=60, message="every member ended")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert discarded > 0
    counts = queue.batch_status(batch.batch_id, QUEUE, TENANT).counts
    assert counts == {"completed": 300 - discarded, "dead_letter": discarded}
    closed_failed(queue, batch, 300, discarded)


def test_two_deletes_of_the_same_pending_members_at_once_count_each_once(db, connect):
    queue = make_queue(db)
    batches = [queue.enqueue_batch(members(2, f"b{n}-"), **callbacks()) for n in range(50)]
    firsts = [batch.job_ids[0] for batch in batches]
    barrier = threading.Barrier(2)
    deleted: List[int] = []
    errors: List[BaseException] = []

    def operator(delete) -> None:
        own = connect()
        try:
            barrier.wait(timeout=30)
            deleted.append(sum(delete(own, ident) for ident in firsts))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=operator, args=(delete,)) for delete in (
        lambda own, ident: QueueAdmin(own).delete(ident),
        lambda own, ident: make_queue(own).delete(ident, QUEUE, TENANT))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sum(deleted) == 50, deleted
    for batch in batches:
        status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
        assert (status.finished, status.failed, status.closed_at) == (1, 1, None)
        assert state_of(db, batch.on_failure) == "pending"
