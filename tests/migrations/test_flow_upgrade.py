"""Migration 0010 (flow control) on a database in use: jobs written before it, by code
that knows nothing of groups, are claimed, run and reported after it, also by a queue
that declares flow control; code from before it still enqueues and claims against the
new schema (a rolling deploy); 0010 can be reverted and applied again."""
from __future__ import annotations

from datetime import timedelta

from caravel_lite import JobState, migrate
from caravel_lite.migrator import runner
from caravel_lite.schema import JOBS_TABLE, SLOTS_TABLE
from caravel_lite.statements import INSERT_COLUMNS
from tests.flow.jobs import QUEUE, Export, Task, make_queue, registry, to
from tests.migrations.test_migrations import ALL, fresh  # noqa: F401 (fixture)


def _old_insert(db, job_id: str, tenant: str, now_ms: int) -> None:
    """A job as the code before 0010 wrote it: its INSERT names the columns of then."""
    values = (job_id, QUEUE, tenant, None, None, "flow.task.v1", '{"n":1}', 2, now_ms, 3,
              "pending", now_ms, 0, 0, 0, now_ms)
    marks = ", ".join([db.param] * len(INSERT_COLUMNS))
    db.execute_sql(f"INSERT INTO {JOBS_TABLE} ({', '.join(INSERT_COLUMNS)}) "
                   f"VALUES ({marks})", values)


def test_jobs_from_before_0010_run_under_flow_control_after_it(fresh):  # noqa: F811
    # The release before 0010 (0009 its last migration).
    assert runner(fresh).up("0009_control") == ALL[:9]
    old_queue = make_queue(fresh)
    leased_before = old_queue.enqueue(Task(1), to("tenant-a")).job_id
    lease = old_queue.claim(QUEUE)
    assert lease.job_id == leased_before
    pending_before = old_queue.enqueue(Task(2), to("tenant-a")).job_id

    assert migrate(fresh)[0] == "0010_flow_control"  # and the migrations after it
    assert SLOTS_TABLE in fresh.get_tables()
    # A rolling deploy: a process still on the old code writes a job after 0010.
    now_ms = old_queue._now_ms()
    _old_insert(fresh, "01000000-0000-7000-8000-000000000001", "tenant-b", now_ms)
    # The lease taken before the migration is still owned and completes.
    assert old_queue.complete(lease)

    fair = make_queue(fresh, registry(concurrency_limit=1), fair_tenants=True)
    flood = [fair.enqueue(Task(i), to("tenant-c")).job_id for i in range(3)]
    keyed = [fair.enqueue(Export(i), to("tenant-d", key="k")).job_id for i in range(2)]
    claimed = []
    while True:
        got = fair.claim(QUEUE)
        if got is None:
            break
        claimed.append(got)
        if got.job_id != keyed[0]:
            assert fair.complete(got)
    ids = {str(lease.job_id) for lease in claimed}
    # Every job ran except the second of the key, held back by the first, still leased.
    assert ids == {str(pending_before), "01000000-0000-7000-8000-000000000001",
                   *map(str, flood), str(keyed[0])}
    status = fair.status(keyed[1], queue=QUEUE, tenant_id="tenant-d")
    assert status.state is JobState.PENDING and status.attempts == 0
    assert fair.status(leased_before, queue=QUEUE, tenant_id="tenant-a").state \
        is JobState.COMPLETED


def test_0010_can_be_reverted_and_applied_again(fresh):  # noqa: F811
    migrate(fresh)
    fair = make_queue(fresh, fair_tenants=True, lease_duration=timedelta(seconds=30))
    job = fair.enqueue(Task(1), to("tenant-a")).job_id
    assert runner(fresh).down("0010_flow_control")[-1] == "0010_flow_control"
    assert SLOTS_TABLE not in fresh.get_tables()
    columns = {c.name for c in fresh.get_columns(JOBS_TABLE)}
    assert "flow_group" not in columns and "concurrency_key" not in columns
    plain = make_queue(fresh)
    assert plain.claim(QUEUE).job_id == job  # the job outlived its group
    assert migrate(fresh)[0] == "0010_flow_control"
