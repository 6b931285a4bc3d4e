"""A gated queue's claim stays bounded with 10,000 tenants holding ready jobs: each of
its reads is an ordered seek of ``caravel_jobs_flow_group`` (no full scan, no sort, no
skip-scan), on every database, beside history and other queues' backlogs."""
from __future__ import annotations

import uuid

from caravel_lite import limits
from caravel_lite.schema import FLOW_INDEX, JOBS_TABLE
from caravel_lite.statements import INSERT_COLUMNS
from tests.contract.explain import ANALYZE, PLANS
from tests.flow.jobs import QUEUE, Task, make_queue, to

TENANTS = 10_000
BATCH = 250


def _load(db, now_ms: int) -> None:
    """Two ready jobs per tenant (one urgent) in the fair queue, delayed jobs, completed
    history, and an ungated queue's backlog."""
    def row(i: int) -> list:
        tenant = f"tenant-{i % TENANTS:05d}"
        queue, state, due, group = QUEUE, "pending", now_ms - 1000, tenant
        if i >= 2 * TENANTS:
            kind = i % 3
            if kind == 0:
                state = "completed"
            elif kind == 1:
                due = now_ms + 60_000
            else:
                queue, group = "plain", None
        return [str(uuid.uuid4()), queue, tenant, None, None, "flow.task.v1", '{"n":1}',
                1 + (i // TENANTS) % 2, due, 3, state, now_ms - 1000, 0, 0, 0, now_ms,
                group, None]

    total = 3 * TENANTS
    sql = limits.insert_sql(JOBS_TABLE, INSERT_COLUMNS, db.param, BATCH)
    with db.atomic():
        for start in range(0, total, BATCH):
            db.execute_sql(sql, [v for i in range(start, start + BATCH) for v in row(i)])


def test_the_fair_claim_reads_one_seek_per_group_with_10000_tenants(db, backend):
    queue = make_queue(db, fair_tenants=True)
    now_ms = queue._now_ms()
    _load(db, now_ms)
    db.execute_sql(ANALYZE[backend])
    groups = queue._groups
    for sql, params in ((groups.first_group, (QUEUE,)),
                        (groups.next_group, (QUEUE, "tenant-05000")),
                        (groups.head, (QUEUE, "tenant-05000", now_ms, 1))):
        plan = PLANS[backend](db, sql, params)
        assert plan.index == FLOW_INDEX.name, plan.text
        assert not plan.full_scan, plan.text
        assert not plan.sorts, plan.text
        assert not plan.skip_scan, plan.text
    # and the claim rotates through them: the first claims serve different tenants,
    # each its urgent job first
    leases = queue.claim_many(QUEUE, 5)
    assert len({lease.context.tenant_id for lease in leases}) == 5
    assert len(leases) == 5
    job = queue.enqueue(Task(1), to("tenant-late")).job_id
    assert queue.status(job, queue=QUEUE, tenant_id="tenant-late") is not None
