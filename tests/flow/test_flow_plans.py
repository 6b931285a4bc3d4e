"""A gated queue's claim stays bounded with 10,000 tenants holding ready jobs: each of
its reads is an ordered seek of ``caravel_jobs_flow_group`` (no full scan, no sort, no
skip-scan), on every database, beside history and other queues' backlogs."""
from __future__ import annotations

import uuid

import pytest

from caravel_lite import QueueAdmin, limits
from caravel_lite.admin.limited import limited_keys_statement
from caravel_lite.dialect import dialect_of
from caravel_lite.schema import FLOW_INDEX, JOBS_TABLE
from caravel_lite.statements import INSERT_COLUMNS
from tests.contract.explain import ANALYZE, PLANS, ROWS_READ
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


@pytest.mark.without_partial_indexes  # partial ones: test_partial_indexes_hold_only_the_rows_they_serve
def test_an_ungated_jobs_flow_index_entry_never_moves_where_it_holds_every_row(db):
    """Where the flow index cannot be partial (MariaDB, MySQL) it holds every job, so it
    keys on flow_state (migration 0013), the state of a grouped job and NULL for any
    other: a claim or completion of a job outside gated queues leaves its entry as the
    enqueue wrote it, while a grouped job's entry follows its state for the gated
    claim's seeks."""
    dialect = dialect_of(db)
    keyed_on = [ix.columns for ix in db.get_indexes(JOBS_TABLE) if ix.name == FLOW_INDEX.name]
    assert keyed_on and "state" not in keyed_on[0] and dialect.flow_state in keyed_on[0]
    plain, fair = make_queue(db), make_queue(db, fair_tenants=True)
    ungated = str(plain.enqueue(Task(1), to("tenant-a", queue="plain")).job_id)
    grouped = str(fair.enqueue(Task(2), to("tenant-a")).job_id)

    def keys():
        rows = db.execute_sql(f"SELECT id, {dialect.flow_state}, state FROM {JOBS_TABLE}")
        return {job_id: (flow_state, state) for job_id, flow_state, state in rows.fetchall()}

    assert keys() == {ungated: (None, "pending"), grouped: ("pending", "pending")}
    leases = [plain.claim("plain"), fair.claim(QUEUE)]
    assert all(leases)
    assert keys() == {ungated: (None, "leased"), grouped: ("leased", "leased")}
    assert plain.complete(leases[0]) and fair.complete(leases[1])
    assert keys() == {ungated: (None, "completed"), grouped: ("completed", "completed")}


def test_limited_keys_of_a_queue_read_its_pending_and_leased_entries_not_its_history(db,
                                                                                   backend):
    """The operators' limited keys (dashboard, ``queues``/``stats --queue``) seek the flow
    index by queue and state, so a queue's finished grouped jobs are never read: on
    MariaDB, where the index holds every job keyed on flow_state, a filter on ``state``
    could seek the queue only and walk all of its history."""
    now_ms = make_queue(db)._now_ms()
    rows = [[str(uuid.uuid4()), QUEUE, "tenant-a", None, None, "flow.export.v1", '{"n":1}',
             1, now_ms - 1000, 3, "completed" if i >= 10 else "pending", now_ms - 1000, 0, 0, 0,
             now_ms, "key:k", "k"] for i in range(5000)]
    sql = limits.insert_sql(JOBS_TABLE, INSERT_COLUMNS, db.param, BATCH)
    with db.atomic():
        for start in range(0, len(rows), BATCH):
            db.execute_sql(sql, [v for row in rows[start:start + BATCH] for v in row])
    db.execute_sql(ANALYZE[backend])
    statement, params = limited_keys_statement(db, dialect_of(db), QUEUE)
    plan = PLANS[backend](db, statement, params)
    assert plan.index == FLOW_INDEX.name, plan.text
    assert not plan.full_scan and not plan.skip_scan, plan.text
    read = ROWS_READ[backend](db, statement, params)
    assert read is None or read < 100, (read, plan.text)
    keys = QueueAdmin(db).limited_keys(queue=QUEUE)
    assert [(k.key, k.leased, k.waiting) for k in keys] == [("k", 0, 10)]
