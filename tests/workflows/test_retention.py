"""A chain's or batch's own rows (caravel_workflows, caravel_workflow_jobs) go once
every job of it is gone, pruned or deleted: in the transaction, and so in the paced
batch, that removes the last one; never while one of its jobs, a callback included,
is left."""
from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any, List

import pytest

from caravel_lite import QueueAdmin
from caravel_lite.clock import floor_ms, now_micros
from caravel_lite.testing import ManualClock, drain
from tests.workflows import jobs
from tests.workflows.jobs import (QUEUE, TENANT, Flaky, Step, make_queue, state_of, to,
                                  workflow_rows)

CALLBACKS = "callbacks"


@pytest.fixture(autouse=True)
def _fresh_records():
    jobs.RAN.clear()
    jobs.FAILING.clear()


def rows_of(db, workflow_id) -> int:
    """The rows a workflow has in its two tables."""
    p = db.param
    ident = str(workflow_id)
    return int(db.execute_sql(f"SELECT COUNT(*) FROM caravel_workflows WHERE id = {p}",
                              (ident,)).fetchone()[0]
               + db.execute_sql(f"SELECT COUNT(*) FROM caravel_workflow_jobs "
                                f"WHERE workflow_id = {p}", (ident,)).fetchone()[0])


def finish_each(queue, clock, queue_name: str, n: int) -> None:
    """Claim and complete ``n`` jobs one at a time, a second apart (so a prune, oldest
    first, takes them in this order)."""
    for _ in range(n):
        lease = queue.claim(queue_name)
        assert lease is not None and queue.complete(lease)
        clock.advance(timedelta(seconds=1))


def test_prune_removes_a_workflows_rows_in_the_batch_that_removes_its_last_job(db):
    clock = ManualClock()
    queue = make_queue(db, clock=clock)
    admin = QueueAdmin(db, clock=clock)
    chain = queue.enqueue_chain([(Step("s0"), to()), (Step("s1"), to())])
    finish_each(queue, clock, QUEUE, 2)
    batch = queue.enqueue_batch([(Step(f"m{k}"), to()) for k in range(3)],
                                on_complete=(Step("done"), to(queue=CALLBACKS)))
    finish_each(queue, clock, QUEUE, 3)
    finish_each(queue, clock, CALLBACKS, 1)
    clock.advance(timedelta(hours=2))
    unfinished = queue.enqueue_batch([(Step("later"), to())])
    assert (rows_of(db, chain.chain_id), rows_of(db, batch.batch_id)) == (3, 4)
    seen: List[Any] = []

    def progress(p) -> None:
        seen.append((p.deleted, rows_of(db, chain.chain_id), rows_of(db, batch.batch_id)))

    # Oldest first, two a batch: the chain's steps, then the members, the callback last.
    assert admin.prune(timedelta(hours=1), batch_size=2, progress=progress) == 6
    assert seen == [(0, 3, 4), (2, 0, 4), (4, 0, 4), (6, 0, 0)]
    assert admin.workflow(chain.chain_id) is None and admin.workflow(batch.batch_id) is None
    assert rows_of(db, unfinished.batch_id) == 2
    assert workflow_rows(db) == 2


def test_a_workflow_keeps_its_rows_while_any_of_its_jobs_is_left(db):
    clock = ManualClock()
    queue = make_queue(db, clock=clock)
    admin = QueueAdmin(db, clock=clock)
    batch = queue.enqueue_batch([(Step("a"), to()), (Step("b"), to())],
                                on_complete=(Step("done"), to(queue=CALLBACKS)))
    drain(queue, QUEUE)
    clock.advance(timedelta(hours=2))
    # the members go; the callback, due and not run yet, keeps the batch
    assert admin.prune(timedelta(hours=1)) == 2
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert status.counts == {} and (status.finished, status.closed_at is not None) == (2, True)
    assert state_of(db, batch.on_complete) == "pending"
    drain(queue, CALLBACKS)
    # a prune of another queue, or one whose cut-off it has not passed, keeps it too
    assert admin.prune(timedelta(hours=1)) == 0 and rows_of(db, batch.batch_id) == 3
    clock.advance(timedelta(hours=2))
    assert queue.prune(timedelta(hours=1), queue="elsewhere") == 0
    assert rows_of(db, batch.batch_id) == 3
    assert queue.prune(timedelta(hours=1), queue=CALLBACKS) == 1
    assert rows_of(db, batch.batch_id) == 0


def test_deleting_the_last_jobs_of_a_workflow_removes_its_rows(db):
    queue = make_queue(db)
    admin = QueueAdmin(db)
    batch = queue.enqueue_batch([(Step("a"), to()), (Step("b"), to())])
    chain = queue.enqueue_chain([(Step("c"), to()), (Step("d"), to())])
    drain(queue, QUEUE)
    first, second = batch.job_ids
    assert admin.delete(first)
    assert rows_of(db, batch.batch_id) == 3
    assert queue.delete(second, QUEUE, TENANT)
    assert rows_of(db, batch.batch_id) == 0
    assert rows_of(db, chain.chain_id) == 3
    assert admin.delete_many(queue=QUEUE, state="completed") == 2
    assert workflow_rows(db) == 0


def test_a_chain_removed_before_it_completed_goes_once_its_cancelled_steps_are_pruned(db):
    clock = ManualClock()
    queue = make_queue(db, clock=clock)
    admin = QueueAdmin(db, clock=clock)
    jobs.FAILING.add("a")
    chain = queue.enqueue_chain([(Flaky("a"), to()), (Flaky("b"), to())])
    drain(queue, QUEUE)
    clock.advance(timedelta(hours=2))
    # the dead letter goes, and the step it held ends cancelled (finished now)
    assert admin.prune(timedelta(hours=1)) == 1
    assert state_of(db, chain.job_ids[1]) == "cancelled" and rows_of(db, chain.chain_id) == 3
    clock.advance(timedelta(hours=2))
    assert admin.prune(timedelta(hours=1)) == 1
    assert rows_of(db, chain.chain_id) == 0


def test_two_operators_deleting_the_last_jobs_of_the_same_batches_at_once_leave_none(
        db, connect):
    queue = make_queue(db)
    batches = [queue.enqueue_batch([(Step(f"s{n}"), to()), (Flaky(f"f{n}"), to())])
               for n in range(150)]
    drain(queue, QUEUE, max_jobs=400)
    assert all(queue.batch_status(b.batch_id, QUEUE, TENANT).closed_at for b in batches)
    barrier = threading.Barrier(2)
    deleted: List[int] = []
    errors: List[BaseException] = []

    def operator(wire_name: str) -> None:
        own = connect()
        try:
            admin = QueueAdmin(own)
            barrier.wait(timeout=30)
            # one job of each batch each, one statement per job: the two interleave
            deleted.append(sum(admin.delete(job.job_id) for job in admin.jobs(
                queue=QUEUE, state="completed", wire_name=wire_name, limit=200).jobs))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=operator, args=(name,))
               for name in ("workflows.step.v1", "workflows.flaky.v1")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert deleted == [150, 150]
    assert workflow_rows(db) == 0


def test_the_workers_pruning_ends_a_removed_chain_by_the_queues_clock(db):
    """The worker's idle pruning (prune=) ends the held steps of a chain whose step it
    removed with the queue's clock, as QueueAdmin.prune does, not the system's."""
    from caravel_lite.worker import retention as worker_retention

    clock = ManualClock()
    queue = make_queue(db, clock=clock)
    jobs.FAILING.add("a")
    chain = queue.enqueue_chain([(Flaky("a"), to()), (Flaky("b"), to())])
    drain(queue, QUEUE)
    clock.advance(timedelta(hours=2))
    pruning = worker_retention.IdlePruning(queue, timedelta(hours=1))
    assert pruning.step([QUEUE])
    assert state_of(db, chain.job_ids[1]) == "cancelled"
    (finished_at,) = db.execute_sql(
        f"SELECT finished_at FROM caravel_jobs WHERE id = {db.param}",
        (str(chain.job_ids[1]),)).fetchone()
    assert finished_at == floor_ms(now_micros(clock))
