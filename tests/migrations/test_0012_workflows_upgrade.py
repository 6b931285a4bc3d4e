"""Migration 0012 (chains and batches) on a database in use: jobs written and leased
before it run and complete after it; code from before it still enqueues, claims and
completes against the new schema (a rolling deploy: it never reads the new tables);
the new code's chains and batches run; 0012 can be reverted and applied again."""
from __future__ import annotations

from caravel_lite import JobState, migrate
from caravel_lite.migrator import runner
from caravel_lite.schema import WORKFLOW_JOBS_TABLE, WORKFLOWS_TABLE
from caravel_lite.testing import drain
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue
from tests.migrations.test_migrations import ALL, fresh  # noqa: F401 (fixture)
from tests.workflows import jobs as flows
from tests.workflows.jobs import Step, to


def test_jobs_from_before_0012_run_after_it_beside_chains_and_batches(fresh):  # noqa: F811
    assert runner(fresh).up("0011_trace_context") == ALL[:11]
    old = make_queue(fresh)
    leased = old.enqueue(Ping(1), dispatch()).job_id
    lease = old.claim(QUEUE)
    assert lease.job_id == leased
    waiting = old.enqueue(Ping(2), dispatch()).job_id

    assert runner(fresh).up("0012_workflows") == ["0012_workflows"]
    assert {WORKFLOWS_TABLE, WORKFLOW_JOBS_TABLE} <= set(fresh.get_tables())
    assert old.complete(lease)  # the lease taken before the migration still completes
    later = old.enqueue(Ping(3), dispatch()).job_id  # the old statements, new schema
    while (got := old.claim(QUEUE)) is not None:
        assert old.complete(got)
    for job in (leased, waiting, later):
        assert old.status(job, queue=QUEUE, tenant_id=TENANT).state is JobState.COMPLETED

    new = flows.make_queue(fresh)
    flows.RAN.clear()
    chain = new.enqueue_chain([(Step("one"), to()), (Step("two"), to())])
    batch = new.enqueue_batch([(Step("member"), to())], on_complete=(Step("after"), to()))
    drain(new, flows.QUEUE)
    assert flows.RAN.index("one") < flows.RAN.index("two")
    assert flows.RAN.index("member") < flows.RAN.index("after")
    assert new.chain_status(chain.chain_id, flows.QUEUE, flows.TENANT).closed_at is not None
    assert new.batch_status(batch.batch_id, flows.QUEUE, flows.TENANT).finished == 1


def test_0012_can_be_reverted_and_applied_again(fresh):  # noqa: F811
    migrate(fresh)
    queue = make_queue(fresh)
    job = queue.enqueue(Ping(1), dispatch()).job_id
    assert runner(fresh).down("0012_workflows")[-1] == "0012_workflows"
    assert WORKFLOWS_TABLE not in fresh.get_tables()
    assert queue.claim(QUEUE).job_id == job
    assert migrate(fresh)[0] == "0012_workflows"
    assert WORKFLOW_JOBS_TABLE in fresh.get_tables()
