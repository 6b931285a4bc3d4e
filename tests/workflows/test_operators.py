"""What operators see of chains and batches: QueueAdmin.chains()/batches()/workflow(),
a job's detail naming its chain or batch, held steps counted in the queue's state
counts and listed, and the command line's ``chains``, ``batches`` and ``show``."""
from __future__ import annotations

import json

from caravel_lite import JobState, QueueAdmin
from caravel_lite.testing import drain
from tests.cli import procs as cli_procs
from tests.workflows import jobs
from tests.workflows.jobs import QUEUE, TENANT, Flaky, Step, make_queue, to


def _cli(db_url: str, *args: str) -> str:
    done = cli_procs.run(*args, "--database", db_url, timeout=120)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def test_admin_lists_chains_and_batches_newest_first_with_their_jobs_by_state(db):
    queue = make_queue(db)
    jobs.FAILING.clear()
    jobs.FAILING.add("bad")
    chain = queue.enqueue_chain([(Flaky("bad"), to()), (Step("after"), to())])
    batch = queue.enqueue_batch([(Step("m"), to())], on_complete=(Step("cb"), to()))
    older = queue.enqueue_batch([(Step("old"), to())])
    drain(queue, QUEUE)
    admin = QueueAdmin(db)
    (listed,) = admin.chains(QUEUE).workflows
    assert listed.workflow_id == chain.chain_id and listed.tenant_id == TENANT
    assert listed.counts == {"dead_letter": 1, "held": 1} and listed.finished == 0
    page = admin.batches(QUEUE, limit=1)
    assert [b.workflow_id for b in page.workflows] == [older.batch_id]
    rest = admin.batches(QUEUE, after=page.next_cursor)
    assert [b.workflow_id for b in rest.workflows] == [batch.batch_id]
    assert rest.workflows[0].on_complete == batch.on_complete
    assert admin.workflow(batch.batch_id).closed_at is not None
    # a job's detail names its workflow and its role there
    step = admin.job(chain.job_ids[1])
    assert (step.workflow_id, step.workflow_kind, step.workflow_role) == (
        chain.chain_id, "chain", "step")
    callback = admin.job(batch.on_complete)
    assert (callback.workflow_kind, callback.workflow_role) == ("batch", "callback")
    assert admin.job(queue.enqueue(Step("plain"), to()).job_id).workflow_id is None
    # held steps are counted and listed as their own state
    assert queue.counts(QUEUE, TENANT).held == 1
    held = admin.jobs(queue=QUEUE, state="held").jobs
    assert [job.job_id for job in held] == [chain.job_ids[1]]
    assert held[0].state is JobState.HELD


def test_the_command_line_shows_chains_batches_and_a_jobs_workflow(db, db_url):
    from caravel_lite import open_database
    own = open_database(db_url)
    queue = make_queue(own)
    chain = queue.enqueue_chain([(Step("a"), to()), (Step("b"), to())])
    batch = queue.enqueue_batch([(Step("m"), to())], on_failure=(Step("f"), to()))
    chains = _cli(db_url, "chains", QUEUE)
    assert str(chain.chain_id) in chains and "held=1" in chains and "pending=1" in chains
    batches = _cli(db_url, "batches", QUEUE, "--json")
    (data,) = [json.loads(line) for line in batches.splitlines()]
    assert data["workflow_id"] == str(batch.batch_id) and data["counts"] == {"pending": 1}
    shown = _cli(db_url, "show", str(chain.job_ids[1]))
    assert f"chain            {chain.chain_id} (step)" in shown or \
        f"{chain.chain_id} (step)" in shown
    assert "held" in shown
    own.close()


def test_an_operator_cancels_what_is_left_of_a_chain_of_any_tenant(db):
    queue = make_queue(db)
    chain = queue.enqueue_chain([(Step("a"), to()), (Step("b"), to()), (Step("c"), to())])
    lease = queue.claim(QUEUE)
    admin = QueueAdmin(db)
    assert admin.cancel_chain(chain.chain_id, dry_run=True) == 3
    assert [jobs.state_of(db, i) for i in chain.job_ids] == ["leased", "held", "held"]
    # the running step is asked to stop, the held ones end cancelled
    assert admin.cancel_chain(chain.chain_id) == 3
    assert [jobs.state_of(db, i) for i in chain.job_ids[1:]] == ["cancelled", "cancelled"]
    assert queue.end_cancelled(lease)
    assert admin.cancel_chain(chain.chain_id) == 0
    assert admin.cancel_chain(chain.chain_id, dry_run=True) == 0
    batch = queue.enqueue_batch([(Step("m"), to())])
    assert admin.cancel_chain(batch.batch_id) == 0
    assert jobs.state_of(db, batch.job_ids[0]) == "pending"


def test_the_command_line_cancels_a_chain_with_a_dry_run_first(db, db_url):
    from caravel_lite import open_database
    own = open_database(db_url)
    queue = make_queue(own)
    chain = queue.enqueue_chain([(Step("a"), to()), (Step("b"), to())])
    batch = queue.enqueue_batch([(Step("m"), to())])
    ident = str(chain.chain_id)
    assert f"{ident}: 2 step(s) would be cancelled" in _cli(
        db_url, "cancel-chain", ident, "--dry-run")
    assert [jobs.state_of(own, i) for i in chain.job_ids] == ["pending", "held"]
    (data,) = [json.loads(line) for line in _cli(
        db_url, "cancel-chain", ident, "--json").splitlines()]
    assert data == {"chain_id": ident, "cancelled": 2, "dry_run": False}
    assert [jobs.state_of(own, i) for i in chain.job_ids] == ["cancelled", "cancelled"]
    # nothing left, a batch, an unknown id: said, and exit 1; not an id: exit 2
    unknown = "00000000-0000-4000-8000-000000000000"
    done = cli_procs.run("cancel-chain", ident, str(batch.batch_id), unknown,
                         "--database", db_url, timeout=120)
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert f"{ident} not cancelled (nothing left to cancel)" in done.stdout
    assert f"{batch.batch_id} not cancelled (a batch, not a chain)" in done.stdout
    assert f"{unknown} not cancelled (no such chain)" in done.stdout
    assert "0 of 3 chain(s) cancelled" in done.stderr
    assert jobs.state_of(own, batch.job_ids[0]) == "pending"
    refused = cli_procs.run("cancel-chain", "nope", "--database", db_url, timeout=120)
    assert refused.returncode == 2 and "not a chain id" in refused.stderr
    own.close()
