"""The dashboard's Workflows page shows a queue's chains and batches with their jobs
by state, and a job's page names its chain or batch (every database)."""
from __future__ import annotations

from tests.workflows.jobs import QUEUE, Step, make_queue, to


def test_the_workflows_page_lists_a_queues_chains_and_batches(browser, db):
    queue = make_queue(db)
    chain = queue.enqueue_chain([(Step("a"), to()), (Step("b"), to())])
    batch = queue.enqueue_batch([(Step("m"), to())], on_complete=(Step("cb"), to()))
    page = browser().page(f"/workflows?queue={QUEUE}")
    chains = page.find("table", data_kind="chain")
    row = chains.find("tr", data_workflow=str(chain.chain_id))
    assert "held 1" in row.text() and "pending 1" in row.text()
    batches = page.find("table", data_kind="batch")
    assert "pending 1" in batches.find("tr", data_workflow=str(batch.batch_id)).text()
    step = browser().page(f"/jobs/{chain.job_ids[1]}")
    shown = step.find("dd", class_="workflow").text()
    assert str(chain.chain_id) in shown and "step" in shown
    assert "held" in step.text()
