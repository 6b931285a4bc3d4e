"""queue.enqueue_chain: step n+1 becomes claimable only when step n completes; a step
that fails for good holds the rest (HELD, counted and listed) until it is replayed
and completes, or the chain is cancelled. Written in one transaction."""
from __future__ import annotations

from datetime import timedelta

import pytest

from caravel_lite import Failure, InvalidField, JobState, QueueAdmin, QueueIdempotencyConflict
from caravel_lite.testing import drain
from tests.workflows import jobs
from tests.workflows.jobs import (QUEUE, TENANT, Flaky, InTransaction, Step, count,
                                  make_queue, state_of, to, workflow_rows)


@pytest.fixture(autouse=True)
def _fresh_records():
    jobs.RAN.clear()
    jobs.FAILING.clear()


def test_steps_run_in_order_and_each_waits_for_the_one_before(db):
    queue = make_queue(db)
    chain = queue.enqueue_chain([(Step(f"s{n}"), to()) for n in range(5)])
    assert [state_of(db, i) for i in chain.job_ids] == ["pending"] + ["held"] * 4
    # only the head is claimable: the held steps are not in the claim's range
    leases = queue.claim_many(QUEUE, 10)
    assert [lease.job_id for lease in leases] == [chain.job_ids[0]]
    assert queue.complete(leases[0])
    assert state_of(db, chain.job_ids[1]) == "pending"
    assert state_of(db, chain.job_ids[2]) == "held"
    drain(queue, QUEUE)
    assert jobs.RAN == ["s1", "s2", "s3", "s4"]
    status = queue.chain_status(chain.chain_id, QUEUE, TENANT)
    assert status.counts == {"completed": 5} and status.finished == 5
    assert status.closed_at is not None


def test_a_failed_step_holds_the_rest_until_it_is_replayed_and_completes(db):
    queue = make_queue(db)
    jobs.FAILING.add("b")
    chain = queue.enqueue_chain([(Flaky("a"), to()), (Flaky("b"), to()),
                                 (Flaky("c"), to()), (Flaky("d"), to())])
    drain(queue, QUEUE)
    assert jobs.RAN == ["a"]
    assert [state_of(db, i) for i in chain.job_ids] == ["completed", "dead_letter",
                                                        "held", "held"]
    status = queue.chain_status(chain.chain_id, QUEUE, TENANT)
    assert status.counts == {"completed": 1, "dead_letter": 1, "held": 2}
    assert status.closed_at is None
    admin = QueueAdmin(db)
    # counted and listed as held
    held = admin.jobs(queue=QUEUE, state=JobState.HELD)
    assert {job.job_id for job in held.jobs} == set(chain.job_ids[2:])
    # a replay that fails again still holds them; one that completes resumes the chain
    assert admin.replay(chain.job_ids[1])
    drain(queue, QUEUE)
    assert state_of(db, chain.job_ids[2]) == "held"
    jobs.FAILING.clear()
    assert admin.replay(chain.job_ids[1])
    drain(queue, QUEUE)
    assert jobs.RAN == ["a", "b", "c", "d"]
    assert queue.chain_status(chain.chain_id, QUEUE, TENANT).counts == {"completed": 4}


def test_a_step_that_fails_and_retries_keeps_its_place(db):
    queue = make_queue(db, max_attempts=3)
    chain = queue.enqueue_chain([(Step("a"), to()), (Step("b"), to())])
    lease = queue.claim(QUEUE)
    assert queue.fail(lease, Failure.HANDLER_FAILED)
    assert state_of(db, chain.job_ids[0]) == "pending"
    assert state_of(db, chain.job_ids[1]) == "held"


def test_a_chain_in_a_rolled_back_transaction_leaves_nothing(db):
    queue = make_queue(db)
    with pytest.raises(RuntimeError):
        with db.atomic():
            queue.enqueue_chain([(Step("a"), to()), (Step("b"), to())])
            raise RuntimeError("roll back")
    assert count(db) == 0 and workflow_rows(db) == 0
    with db.atomic():
        chain = queue.enqueue_chain([(Step("a"), to()), (Step("b"), to())])
    assert count(db) == 2
    assert queue.chain_status(chain.chain_id, QUEUE, TENANT).total == 2


def test_a_chain_is_idempotent_as_a_whole_by_its_first_steps_key(db):
    queue = make_queue(db)
    steps = [(Step("a"), to(idempotency_key="order-1")), (Step("b"), to())]
    first = queue.enqueue_chain(steps)
    again = queue.enqueue_chain(steps)
    assert again.already_enqueued and not first.already_enqueued
    assert (again.chain_id, again.job_ids) == (first.chain_id, first.job_ids)
    assert count(db) == 2
    with pytest.raises(QueueIdempotencyConflict):
        queue.enqueue_chain([(Step("other"), to(idempotency_key="order-1"))])
    queue.enqueue(Step("plain"), to(idempotency_key="plain-1"))
    with pytest.raises(QueueIdempotencyConflict):
        queue.enqueue_chain([(Step("plain"), to(idempotency_key="plain-1"))])


def test_cancelling_the_chain_cancels_what_is_left(db):
    queue = make_queue(db)
    chain = queue.enqueue_chain([(Step(f"s{n}"), to()) for n in range(4)])
    lease = queue.claim(QUEUE)
    assert queue.complete(lease)
    assert queue.cancel_chain(chain.chain_id, QUEUE, "other-tenant") == 0
    assert queue.cancel_chain(chain.chain_id, QUEUE, TENANT) == 3
    assert [state_of(db, i) for i in chain.job_ids] == ["completed"] + ["cancelled"] * 3
    assert queue.cancel_chain(chain.chain_id, QUEUE, TENANT) == 0
    assert queue.claim(QUEUE) is None


def test_steps_completed_in_a_batch_of_completions_release_their_next_steps(db):
    queue = make_queue(db)
    chains = [queue.enqueue_chain([(Step(f"c{n}-a"), to()), (Step(f"c{n}-b"), to())])
              for n in range(3)]
    plain = queue.enqueue(Step("plain"), to()).job_id
    leases = queue.claim_many(QUEUE, 10)
    assert len(leases) == 4
    assert queue.complete_many(leases) == [True] * 4
    assert state_of(db, plain) == "completed"
    assert all(state_of(db, c.job_ids[1]) == "pending" for c in chains)


@pytest.mark.parametrize("steps, field", [
    ([], "steps"),
    ("ab", "steps"),
    ([Step("a")], "steps[0]"),
    ([(Step("a"), to()), (Step("b"), to(tenant_id="t2"))], "steps"),
    ([(Step("a"), to()), (Step("b"), to(idempotency_key="k"))], "steps"),
])
def test_bad_chains_are_refused_naming_the_field_and_write_nothing(db, steps, field):
    queue = make_queue(db)
    with pytest.raises(InvalidField) as raised:
        queue.enqueue_chain(steps)
    assert raised.value.field == field
    assert count(db) == 0 and workflow_rows(db) == 0


def test_a_step_completed_in_its_handlers_transaction_releases_the_next_in_it(db):
    queue = make_queue(db)
    chain = queue.enqueue_chain([(InTransaction("t1"), to()), (Step("after"), to())])
    batch = queue.enqueue_batch([(InTransaction("t2"), to())],
                                on_complete=(Step("callback"), to()))
    drain(queue, QUEUE)
    assert jobs.RAN.index("t1") < jobs.RAN.index("after")
    assert jobs.RAN.index("t2") < jobs.RAN.index("callback")
    assert queue.chain_status(chain.chain_id, QUEUE, TENANT).counts == {"completed": 2}
    assert queue.batch_status(batch.batch_id, QUEUE, TENANT).finished == 1


def test_a_step_that_keeps_its_result_releases_the_next_and_keeps_both_options(db):
    queue = make_queue(db)
    kept = to(keep_result=True, timeout=timedelta(seconds=30))
    chain = queue.enqueue_chain([(Step("kept"), kept), (Step("after"), to())])
    drain(queue, QUEUE)
    assert jobs.RAN == ["kept", "after"]
    result = queue.result(chain.job_ids[0], QUEUE, TENANT)
    assert result is not None and result.state is JobState.COMPLETED
    options = db.execute_sql(f"SELECT job_options FROM caravel_jobs WHERE id = {db.param}",
                             (str(chain.job_ids[0]),)).fetchone()[0]
    assert '"keep_result":true' in options and '"timeout_us":30000000' in options


def test_a_running_worker_claims_the_next_step_at_once_not_at_its_next_poll(db, monkeypatch):
    """The step's completion makes the next step due in the worker's own write: no
    signal a waiter sees on a database without one (MariaDB polls), so the worker
    claims again at once after a workflow job ends. Here the waiter hears nothing
    whatever the database (it only waits), and the poll interval outlasts the test."""
    import threading

    from caravel_lite.worker import QueueWorker
    from caravel_lite.worker import waiter as waiter_module
    from tests.support import wait_for

    real = waiter_module.waiter_for

    def deaf(queue, names):
        inner = real(queue, names)
        inner.wait = lambda wakeup, timeout: wakeup.wait(timeout)
        return inner

    monkeypatch.setattr(waiter_module, "waiter_for", deaf)
    jobs.RAN.clear()
    queue = make_queue(db)
    queue.enqueue_chain([(Step(f"s{n}"), to()) for n in range(4)])
    stop = threading.Event()
    worker = threading.Thread(target=QueueWorker(queue, poll_interval=120).run,
                              args=(QUEUE,), kwargs={"stop": stop})
    worker.start()
    try:
        wait_for(lambda: jobs.RAN == ["s0", "s1", "s2", "s3"], timeout=20,
                 message="every step, each claimed after the one before ended")
    finally:
        stop.set()
        worker.join(30)
    assert not worker.is_alive()
