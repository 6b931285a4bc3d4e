"""Batch callbacks happen exactly once under concurrency and crashes: many threads in
two processes finishing the last jobs of 200 batches at once, and a worker killed
(SIGKILL) inside the completing transaction or right after it."""
from __future__ import annotations

import multiprocessing
import os
import signal
from datetime import timedelta

from caravel_lite.testing import drain
from tests.support import wait_for
from tests.workflows import jobs, procs
from tests.workflows.jobs import QUEUE, TENANT, Step, make_queue, state_of, to

BATCHES = 200


def test_200_batches_finished_by_2_processes_of_8_threads_decide_each_callback_once(
        db_url, db):
    queue = make_queue(db)
    batches = [queue.enqueue_batch([(Step(f"b{n}-x"), to()), (Step(f"b{n}-y"), to())],
                                   on_complete=(Step(f"b{n}-done"), to(queue="callbacks")),
                                   on_success=(Step(f"b{n}-ok"), to(queue="callbacks")),
                                   on_failure=(Step(f"b{n}-bad"), to(queue="callbacks")))
               for n in range(BATCHES)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(16)
    results = context.Queue()
    children = [context.Process(target=procs.finish_members,
                                args=(db_url, barrier, 8, results)) for _ in range(2)]
    for child in children:
        child.start()
    completed = sum(results.get(timeout=procs.TIMEOUT) for _ in children)
    for child in children:
        child.join(procs.TIMEOUT)
        assert child.exitcode == 0
    assert completed == 2 * BATCHES
    for batch in batches:
        status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
        assert (status.finished, status.failed) == (2, 0), batch
        assert status.closed_at is not None
        assert state_of(db, batch.on_complete) == "pending"
        assert state_of(db, batch.on_success) == "pending"
        assert state_of(db, batch.on_failure) == "cancelled"
    jobs.RAN.clear()
    drain(queue, "callbacks")
    assert sorted(jobs.RAN) == sorted([f"b{n}-done" for n in range(BATCHES)]
                                      + [f"b{n}-ok" for n in range(BATCHES)])


def _killed_after_it_says(target, db_url):
    """Run ``target`` in a child process; SIGKILL it once it reports; its report."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=target, args=(db_url, results))
    child.start()
    said = results.get(timeout=procs.TIMEOUT)
    os.kill(child.pid, signal.SIGKILL)
    child.join(procs.TIMEOUT)
    return said


def _batch_with_one_left(queue):
    batch = queue.enqueue_batch([(Step("first"), to()), (Step("last"), to())],
                                on_complete=(Step("callback"), to()))
    lease = queue.claim(QUEUE)
    assert queue.complete(lease)
    return batch


def test_a_kill_inside_the_last_completion_leaves_neither_and_the_takeover_decides_once(
        db_url, db):
    queue = make_queue(db, lease_duration=timedelta(seconds=2))
    batch = _batch_with_one_left(queue)
    assert _killed_after_it_says(procs.die_inside_the_last_completion, db_url) == "inside"
    # the member's completion and the callback's release were one transaction
    last = batch.job_ids[1]
    assert state_of(db, last) == "leased"
    assert state_of(db, batch.on_complete) == "held"
    assert queue.batch_status(batch.batch_id, QUEUE, TENANT).finished == 1
    jobs.RAN.clear()
    # the lease expires, the sweep makes the job claimable, a worker completes it
    wait_for(lambda: queue.reclaim_expired(QUEUE) == 1, timeout=30, interval=0.2,
             message="the killed worker's lease swept")
    drain(queue, QUEUE)
    assert state_of(db, last) == "completed"
    drain(queue, QUEUE)
    assert jobs.RAN.count("callback") == 1


def test_a_kill_after_the_last_completion_leaves_the_callback_due_for_any_worker(
        db_url, db):
    queue = make_queue(db)
    batch = _batch_with_one_left(queue)
    assert _killed_after_it_says(procs.complete_the_last_then_wait, db_url) == (
        "completed", True)
    assert state_of(db, batch.on_complete) == "pending"
    jobs.RAN.clear()
    drain(queue, QUEUE)
    assert jobs.RAN == ["callback"]
    status = queue.batch_status(batch.batch_id, QUEUE, TENANT)
    assert (status.finished, status.counts) == (2, {"completed": 2})
