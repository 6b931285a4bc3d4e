"""Migration 0013 (the flow index keyed on flow_state where it holds every row) on a
database in use: jobs written before it, grouped or not, leased or waiting, run after
it, the gated claim still rotating across tenants; 0013 can be reverted and applied
again. Where indexes are partial (SQLite, PostgreSQL) it changes nothing."""
from __future__ import annotations

import pytest

from caravel_lite import JobState, migrate
from caravel_lite.dialect import dialect_of
from caravel_lite.migrator import runner
from caravel_lite.schema import FLOW_INDEX, JOBS_TABLE
from tests.flow.jobs import QUEUE, Task, make_queue, to
from tests.migrations.test_migrations import ALL, fresh  # noqa: F401 (fixture)

BEFORE = ["queue", "state", "flow_group", "priority", "available_at", "enqueued_at", "id"]
AFTER = ["queue", "flow_state", "flow_group", "priority", "available_at", "enqueued_at", "id"]


def _flow_index(db):
    return [list(ix.columns) for ix in db.get_indexes(JOBS_TABLE) if ix.name == FLOW_INDEX.name]


def test_jobs_from_before_0013_run_after_it_and_the_fair_claim_still_rotates(fresh):  # noqa: F811
    assert runner(fresh).up("0012_workflows") == ALL[:12]
    plain, fair = make_queue(fresh), make_queue(fresh, fair_tenants=True)
    leased = plain.enqueue(Task(0), to("tenant-a", queue="plain")).job_id
    lease = plain.claim("plain")
    assert lease.job_id == leased
    flooded = [fair.enqueue(Task(n), to("tenant-a")).job_id for n in range(5)]
    lone = fair.enqueue(Task(9), to("tenant-b")).job_id

    assert migrate(fresh) == ["0013_flow_index_idle_rows"]
    expected = BEFORE if dialect_of(fresh).partial_indexes else AFTER
    assert _flow_index(fresh) == [expected]
    assert plain.complete(lease)  # the lease taken before the migration still completes
    first, second = fair.claim(QUEUE), fair.claim(QUEUE)
    assert {first.job_id, second.job_id} == {flooded[0], lone}  # one turn per tenant
    for got in (first, second):
        assert fair.complete(got)
    while (got := fair.claim(QUEUE)) is not None:
        assert fair.complete(got)
    for job, queue, tenant in [(leased, "plain", "tenant-a"), (lone, QUEUE, "tenant-b"),
                               *[(j, QUEUE, "tenant-a") for j in flooded]]:
        assert fair.status(job, queue=queue, tenant_id=tenant).state is JobState.COMPLETED


def test_0013_can_be_reverted_and_applied_again(fresh):  # noqa: F811
    migrate(fresh)
    fair = make_queue(fresh, fair_tenants=True)
    job = fair.enqueue(Task(1), to("tenant-a")).job_id
    assert runner(fresh).down("0013_flow_index_idle_rows") == ["0013_flow_index_idle_rows"]
    assert _flow_index(fresh) == [BEFORE]
    assert "flow_state" not in {c.name for c in fresh.get_columns(JOBS_TABLE)}
    assert migrate(fresh) == ["0013_flow_index_idle_rows"]
    expected = BEFORE if dialect_of(fresh).partial_indexes else AFTER
    assert _flow_index(fresh) == [expected]
    lease = fair.claim(QUEUE)
    assert lease.job_id == job and fair.complete(lease)


@pytest.mark.without_partial_indexes  # elsewhere 0013 changes nothing
def test_0013_replaces_the_index_in_one_statement_so_old_code_never_misses_it(fresh):  # noqa: F811
    """Old code forces caravel_jobs_flow_group by name in its gated claims: no statement
    of the migration may leave the table without it (a DROP INDEX alone, then a CREATE
    INDEX, failed old workers' claims for the whole rebuild)."""
    assert runner(fresh).up("0012_workflows") == ALL[:12]
    statements = []
    execute = fresh.execute_sql

    def recording(sql, params=None, *args, **kwargs):
        statements.append(" ".join(sql.split()).upper())
        return execute(sql, params, *args, **kwargs)

    fresh.execute_sql = recording
    try:
        assert migrate(fresh) == ["0013_flow_index_idle_rows"]
    finally:
        del fresh.execute_sql
    touching = [s for s in statements if FLOW_INDEX.name.upper() in s]
    assert touching, statements
    for statement in touching:
        assert "ADD INDEX" in statement and statement.startswith("ALTER TABLE"), statement
    assert _flow_index(fresh) == [AFTER]


@pytest.mark.without_partial_indexes
def test_a_0013_cut_short_is_finished_by_migrating_again(fresh):  # noqa: F811
    """DDL is not transactional on MariaDB: a run that died after adding the column and
    before the index was rebuilt (or after a DROP INDEX of an older revision) is
    completed by the next migrate, which checks what is there first."""
    assert runner(fresh).up("0012_workflows") == ALL[:12]
    fresh.execute_sql(f"ALTER TABLE {JOBS_TABLE} ADD COLUMN flow_state VARCHAR(16) "
                      f"GENERATED ALWAYS AS (CASE WHEN flow_group IS NULL THEN NULL "
                      f"ELSE state END) VIRTUAL")
    fresh.execute_sql(f"DROP INDEX {FLOW_INDEX.name} ON {JOBS_TABLE}")
    assert migrate(fresh) == ["0013_flow_index_idle_rows"]
    assert _flow_index(fresh) == [AFTER]
    fair = make_queue(fresh, fair_tenants=True)
    job = fair.enqueue(Task(1), to("tenant-a")).job_id
    lease = fair.claim(QUEUE)
    assert lease.job_id == job and fair.complete(lease)
