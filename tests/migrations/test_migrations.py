"""The migration scripts build exactly the schema the runtime models describe, on
every database; applying them is idempotent; check_schema and the command line report
missing or pending migrations (SPEC §2). Migration 0004 makes three jobs indexes
partial where the database allows it, keeps every stored job and is reversible."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from caravel_lite import (EnqueueResult, QueueIdempotencyConflict, SchemaNotReady,
                          check_schema, migrate)
from caravel_lite.dialect import dialect_of, open_database
from caravel_lite.migrator import pending_migrations, runner
from caravel_lite.schema import (FAILURES_TABLE, HISTORY_TABLE, JOBS_TABLE, OUTBOX_TABLE,
                                 PAUSED_TABLE, SLOTS_TABLE, WORKERS_TABLE, WORKFLOW_JOBS_TABLE,
                                 WORKFLOWS_TABLE, bind_models, control_models,
                                 failures_model, generated_job_columns, slots_model,
                                 workflow_models)
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue
from tests.migrations.before_0008 import code_before_0008
from tests.support import wait_for

ALL = ["0001_create_jobs", "0002_create_outbox", "0003_notify_trigger",
       "0004_partial_indexes", "0005_cluster_jobs_by_id", "0006_failure_history",
       "0007_listings_without_pending", "0008_job_options_and_results", "0009_control",
       "0010_flow_control", "0011_trace_context", "0012_workflows",
       "0013_flow_index_idle_rows"]

# Backends whose jobs indexes are partial once 0004 has run (the others keep 0001's).
PARTIAL_BACKENDS = ("sqlite", "postgres")

CLAIM_INDEX = ("caravel_jobs_queue_state_priority_available_at_enqueued_at_id",
               ("queue", "state", "priority", "available_at", "enqueued_at", "id"), False,
               None)
# The indexes the claim, the sweep, pruning, deduplication and the relay rely on:
# (name, columns, unique, predicate of a partial index), as 0001-0003 left them ...
FULL_JOB_INDEXES = {
    CLAIM_INDEX,
    ("caravel_jobs_queue_state_lease_expires_at",
     ("queue", "state", "lease_expires_at"), False, None),
    ("caravel_jobs_state_finished_at", ("state", "finished_at"), False, None),
    ("caravel_jobs_dedup_key", ("dedup_key",), True, None),
}
# ... and as 0004 leaves them where indexes can be partial.
PARTIAL_JOB_INDEXES = {
    CLAIM_INDEX,
    ("caravel_jobs_queue_state_lease_expires_at",
     ("queue", "lease_expires_at"), False, "state = 'leased'"),
    ("caravel_jobs_state_finished_at", ("state", "finished_at"), False,
     "finished_at is not null"),
    ("caravel_jobs_dedup_key", ("dedup_key",), True, "dedup_key is not null"),
}
# What 0006 changes: the prune index gains queue, two listing indexes are added.
PRUNE_0006 = {
    "caravel_jobs_state_finished_at": ("state", "finished_at", "queue"),
}
def _listing_indexes(where):
    return {("caravel_jobs_queue_state_id", ("queue", "state", "id"), False, where),
            ("caravel_jobs_tenant_id_state_id", ("tenant_id", "state", "id"), False, where)}


# What 0007 changes where indexes can be partial: the listings leave pending jobs out.
LISTINGS_0007 = "state <> 'pending'"


def _as_of_0006(indexes):
    out = {(name, PRUNE_0006.get(name, columns), unique, where)
           for name, columns, unique, where in indexes}
    return out | _listing_indexes(None)


def _as_of_0007(indexes, partial):
    return _as_of_0006(indexes) - _listing_indexes(None) | _listing_indexes(
        LISTINGS_0007 if partial else None)


# What 0010 adds: the gated claim's index, partial where indexes can be.
def _flow_index(partial):
    return ("caravel_jobs_flow_group", ("queue", "state", "flow_group", "priority",
                                        "available_at", "enqueued_at", "id"), False,
            "flow_group is not null" if partial else None)


def _as_of_0010(indexes, partial):
    return _as_of_0007(indexes, partial) | {_flow_index(partial)}


# What 0013 changes where indexes cannot be partial: the flow index keys on flow_state.
def _as_of_0013(indexes, partial):
    if partial:
        return _as_of_0010(indexes, partial)
    name, columns, unique, where = _flow_index(partial)
    return _as_of_0010(indexes, partial) - {_flow_index(partial)} | {
        (name, ("queue", "flow_state", *columns[2:]), unique, where)}


OUTBOX_INDEXES = {
    ("caravel_outbox_dispatched_at_set_aside_at_staged_at_id",
     ("dispatched_at", "set_aside_at", "staged_at", "id"), False, None),
    ("caravel_outbox_dedup_key", ("dedup_key",), True, None),
}


FAILURE_INDEXES = {("caravel_failures_failed_at_queue", ("failed_at", "queue"), False, None)}


def expected_indexes(backend):
    """{table: indexes} of a fully migrated database of this backend."""
    partial = backend in PARTIAL_BACKENDS
    jobs = PARTIAL_JOB_INDEXES if partial else FULL_JOB_INDEXES
    return {JOBS_TABLE: _as_of_0013(jobs, partial), OUTBOX_TABLE: OUTBOX_INDEXES,
            FAILURES_TABLE: FAILURE_INDEXES, PAUSED_TABLE: set(), WORKERS_TABLE: set(),
            SLOTS_TABLE: {("caravel_slots_scope_taken_at", ("scope", "taken_at"), False, None)},
            WORKFLOWS_TABLE: {("caravel_workflows_queue_kind_id", ("queue", "kind", "id"),
                               False, None)},
            WORKFLOW_JOBS_TABLE: set()}


INTEGER_64 = {"sqlite": "integer", "postgres": "bigint", "mysql": "bigint"}
EXACT_TEXT = ("queue", "tenant_id", "idempotency_key", "wire_name")


@pytest.fixture
def fresh(new_database):
    db = open_database(new_database())
    db.connect()
    yield db
    db.close()


def _predicate(sql):
    """The WHERE clause of a CREATE INDEX statement as SQLite keeps it or PostgreSQL
    prints it (pg_indexes.indexdef), in one spelling: lower case, without quotes,
    parentheses or casts; None for an index without one (or MariaDB, which keeps none)."""
    if not sql or " where " not in sql.lower():
        return None
    text = sql[sql.lower().index(" where ") + len(" where "):]
    text = re.sub(r"::(character varying|[a-z]+)", "", text)
    text = re.sub(r'[()"]', "", text)
    return " ".join(text.split()).lower()


def _indexes(db, table):
    return {(ix.name, tuple(ix.columns), bool(ix.unique), _predicate(ix.sql))
            for ix in db.get_indexes(table)
            if ix.name != "PRIMARY" and not ix.name.startswith(("sqlite_autoindex", table + "_pkey"))}


def _model_indexes(model):
    """(name, columns, unique, predicate) of every index the runtime model declares."""
    out = set()
    db = model._meta.database
    for index in model._meta.fields_to_index():
        columns = tuple(getattr(f, "column_name", None) or f.sql for f in index._expressions)
        sql = db.get_sql_context().sql(index).query()[0]
        out.add((index._name, columns, bool(index._unique), _predicate(sql)))
    return out


def test_fresh_database_gets_exactly_the_runtime_schema(fresh, backend):
    assert migrate(fresh) == ALL
    assert sorted(fresh.get_tables()) == sorted([HISTORY_TABLE, JOBS_TABLE, OUTBOX_TABLE,
                                                 FAILURES_TABLE, PAUSED_TABLE, WORKERS_TABLE,
                                                 SLOTS_TABLE, WORKFLOWS_TABLE,
                                                 WORKFLOW_JOBS_TABLE])
    for model in (*bind_models(fresh), failures_model(fresh), *control_models(fresh),
                  slots_model(fresh), *workflow_models(fresh)):
        table = model._meta.table_name
        columns = {c.name: c for c in fresh.get_columns(table)}
        generated = generated_job_columns(dialect_of(fresh)) if table == JOBS_TABLE else ()
        assert set(columns) == set(model._meta.columns) | set(generated), table
        for name, field in model._meta.columns.items():
            assert columns[name].null == field.null, (table, name)
        keys = {FAILURES_TABLE: ["job_id", "seq"], PAUSED_TABLE: ["queue"],
                WORKERS_TABLE: ["worker_id"], SLOTS_TABLE: ["scope", "slot"],
                WORKFLOW_JOBS_TABLE: ["workflow_id", "position"]}.get(table, ["id"])
        assert [c for c in fresh.get_primary_keys(table)] == keys
        assert _indexes(fresh, table) == expected_indexes(backend)[table]
        assert _model_indexes(model) == expected_indexes(backend)[table]


def test_column_types_hold_what_the_queue_stores(fresh, backend):
    migrate(fresh)
    columns = {c.name: c.data_type.lower() for c in fresh.get_columns(JOBS_TABLE)}
    for instant in ("available_at", "enqueued_at", "lease_expires_at", "claimed_at",
                    "updated_at", "finished_at"):
        # SQLite's INTEGER is 64-bit; elsewhere BIGINT (never DATETIME).
        assert columns[instant] == INTEGER_64[backend], (instant, columns[instant])
    assert "date" not in " ".join(columns.values())
    if backend == "mysql":
        assert columns["payload"] in ("mediumtext", "longtext")
        cursor = fresh.execute_sql(
            "SELECT column_name, collation_name FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = %s", (JOBS_TABLE,))
        collations = {name.lower(): collation for name, collation in cursor.fetchall()}
        for name in EXACT_TEXT:
            assert collations[name] == dialect_of(fresh).exact_collation, name
    else:
        assert columns["payload"] == "text"


def test_migrating_twice_is_a_no_op(fresh):
    assert migrate(fresh) == ALL
    tables = (JOBS_TABLE, OUTBOX_TABLE, FAILURES_TABLE)
    before = {t: _indexes(fresh, t) for t in tables}
    assert migrate(fresh) == []
    assert {t: _indexes(fresh, t) for t in tables} == before
    check_schema(fresh)


def test_check_schema_on_an_empty_database_raises_and_changes_nothing(fresh):
    with pytest.raises(SchemaNotReady) as info:
        check_schema(fresh)
    assert list(info.value.pending) == ALL
    assert fresh.get_tables() == []


def test_check_schema_with_a_pending_migration_raises(fresh):
    assert runner(fresh).up("0001_create_jobs") == ["0001_create_jobs"]
    assert pending_migrations(fresh) == ALL[1:]
    with pytest.raises(SchemaNotReady) as info:
        check_schema(fresh)
    assert list(info.value.pending) == ALL[1:]
    assert "0002_create_outbox" in str(info.value)
    assert migrate(fresh) == ALL[1:]
    check_schema(fresh)


def test_0004_can_be_reverted_and_applied_again(fresh, backend):
    migrate(fresh)
    assert runner(fresh).down("0004_partial_indexes") == ALL[3:][::-1]
    assert _indexes(fresh, JOBS_TABLE) == FULL_JOB_INDEXES
    assert pending_migrations(fresh) == ALL[3:]
    assert migrate(fresh) == ALL[3:]
    assert _indexes(fresh, JOBS_TABLE) == expected_indexes(backend)[JOBS_TABLE]


def _index_entries(db, backend):
    """{index name: entries it holds} for the jobs table's own indexes. SQLite's
    ANALYZE counts each index's entries by reading it; PostgreSQL's REINDEX records
    the number of entries it built in pg_class.reltuples."""
    if backend == "sqlite":
        db.execute_sql(f"ANALYZE {JOBS_TABLE}")
        rows = db.execute_sql("SELECT idx, stat FROM sqlite_stat1 WHERE tbl = ?",
                              (JOBS_TABLE,)).fetchall()
        counts = {idx: int(stat.split()[0]) for idx, stat in rows}
    else:
        # VACUUM first: a row version an earlier migration's UPDATE left behind, not
        # yet dead to every transaction, would still be indexed by REINDEX.
        db.execute_sql(f"VACUUM {JOBS_TABLE}")
        db.execute_sql(f"REINDEX TABLE {JOBS_TABLE}")
        rows = db.execute_sql(
            "SELECT c.relname, c.reltuples FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s::regclass", (JOBS_TABLE,)).fetchall()
        counts = {name: int(tuples) for name, tuples in rows}
    return {name: n for name, n in counts.items() if name.startswith(JOBS_TABLE + "_")
            and name != JOBS_TABLE + "_pkey"}


@pytest.mark.backends(*PARTIAL_BACKENDS)
def test_partial_indexes_hold_only_the_rows_they_serve(fresh, backend):
    """Jobs without an idempotency key have no dedup entry, only leased jobs a lease
    entry, only finished jobs a prune entry; the claim index holds every job."""
    migrate(fresh)
    queue = make_queue(fresh)
    queue.enqueue_many([(Ping(n), dispatch()) for n in range(200)])
    queue.enqueue_many([(Ping(n), dispatch(f"key-{n}")) for n in range(3)])
    leases = [queue.claim(QUEUE) for _ in range(3)]
    assert all(leases)
    assert queue.complete(leases[0])
    fair = make_queue(fresh, fair_tenants=True)
    fair.enqueue_many([(Ping(n), dispatch(queue="fair")) for n in range(2)])
    expected = {
        "caravel_jobs_queue_state_priority_available_at_enqueued_at_id": 205,
        "caravel_jobs_dedup_key": 3,
        "caravel_jobs_queue_state_lease_expires_at": 2,
        "caravel_jobs_state_finished_at": 1,
        # Migration 0007: the listings leave the 200 pending jobs out.
        "caravel_jobs_queue_state_id": 3,
        "caravel_jobs_tenant_id_state_id": 3,
        # Migration 0010: only the two jobs of a gated queue have a group.
        "caravel_jobs_flow_group": 2,
    }
    # PostgreSQL's REINDEX also indexes row versions that an open snapshot somewhere on
    # the server may still see (the claims' and completion's old versions), so on a busy
    # server the count can be a few over until that snapshot ends: count again until the
    # old versions are gone, then compare.
    try:
        wait_for(lambda: _index_entries(fresh, backend) == expected, timeout=30,
                 interval=0.5, message="the index counts to settle")
    except AssertionError:
        pass  # the comparison below shows the difference
    assert _index_entries(fresh, backend) == expected


T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)


class _Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def _stored_jobs(db):
    return db.execute_sql(
        "SELECT id, queue, tenant_id, idempotency_key, dedup_key, wire_name, payload, "
        "priority, available_at, max_attempts, state, enqueued_at, attempts, lease_token, "
        "lease_expires_at, claimed_at, finished_at, updated_at "
        f"FROM {JOBS_TABLE} ORDER BY id").fetchall()


def test_upgrading_a_populated_database_keeps_its_jobs_and_their_behaviour(fresh, backend):
    """A database used under 0001-0003 (pending, leased and completed jobs, with and
    without keys) keeps every row through 0004; deduplication, claims, the sweep of
    expired leases and pruning then work on those rows as before."""
    assert runner(fresh).up("0003_notify_trigger") == ALL[:3]
    assert _indexes(fresh, JOBS_TABLE) == FULL_JOB_INDEXES
    clock = _Clock(T0)
    queue = make_queue(fresh, clock=clock, lease_duration=timedelta(seconds=30),
                       max_attempts=3)
    with code_before_0008(queue):
        leased = queue.enqueue(Ping(1), dispatch("leased")).job_id
        assert queue.claim(QUEUE).job_id == leased
        done_keyed = queue.enqueue(Ping(2), dispatch("done")).job_id
        done_plain = queue.enqueue(Ping(3), dispatch()).job_id
        for _ in range(2):
            assert queue.complete(queue.claim(QUEUE))
        pending_keyed = queue.enqueue(Ping(4), dispatch("pending")).job_id
        pending_plain = queue.enqueue(Ping(5), dispatch()).job_id
    before = _stored_jobs(fresh)
    assert len(before) == 5

    assert migrate(fresh) == ALL[3:]
    check_schema(fresh)
    assert _stored_jobs(fresh) == before
    assert _indexes(fresh, JOBS_TABLE) == expected_indexes(backend)[JOBS_TABLE]

    # Deduplication: every stored key, whatever its job's state, answers that job.
    for n, key, job_id in ((1, "leased", leased), (2, "done", done_keyed),
                           (4, "pending", pending_keyed)):
        assert queue.enqueue(Ping(n), dispatch(key)) == EnqueueResult(job_id, True)
    with pytest.raises(QueueIdempotencyConflict):
        queue.enqueue(Ping(99), dispatch("pending"))
    batch = queue.enqueue_many([(Ping(4), dispatch("pending")), (Ping(6), dispatch("new")),
                                (Ping(7), dispatch())])
    assert batch[0] == EnqueueResult(pending_keyed, True)
    assert [r.already_enqueued for r in batch] == [True, False, False]

    # Claims take the pending jobs, old and new, and nothing else.
    claimed = [queue.claim(QUEUE) for _ in range(4)]
    assert {lease.job_id for lease in claimed} == {pending_keyed, pending_plain,
                                                   batch[1].job_id, batch[2].job_id}
    assert queue.claim(QUEUE) is None
    for lease in claimed:
        assert queue.complete(lease)

    # The sweep: the lease taken before the upgrade expires and is reclaimed.
    clock.now = T0 + timedelta(seconds=31)
    assert queue.reclaim_expired(QUEUE) == 1
    retry = queue.claim(QUEUE)
    assert retry.job_id == leased and retry.attempt == 2

    # Pruning: the six finished jobs (two of them from before the upgrade) go, and
    # with them their keys.
    assert queue.prune(older_than=timedelta(seconds=10)) == 6
    assert queue.enqueue(Ping(2), dispatch("done")).already_enqueued is False
    assert queue.enqueue(Ping(1), dispatch("leased")) == EnqueueResult(leased, True)
    remaining = {row[0] for row in _stored_jobs(fresh)}
    assert len(remaining) == 2 and str(leased) in remaining
    assert str(done_keyed) not in remaining and str(done_plain) not in remaining


def _without_rowid(db) -> bool:
    (sql,) = db.execute_sql("SELECT sql FROM sqlite_master WHERE type = 'table' "
                            "AND name = ?", (JOBS_TABLE,)).fetchone()
    return sql.rstrip().upper().endswith("WITHOUT ROWID")


@pytest.mark.backends("sqlite")
def test_0005_rebuilds_the_jobs_table_keyed_by_id_keeping_rows_and_indexes(fresh):
    """On SQLite the jobs table becomes one B-tree keyed by id (WITHOUT ROWID); its
    rows and indexes, an operator's own included, survive the rebuild both ways, and
    the queue works on the rebuilt table."""
    assert runner(fresh).up("0004_partial_indexes") == ALL[:4]
    assert not _without_rowid(fresh)
    queue = make_queue(fresh)
    with code_before_0008(queue):
        queue.enqueue_many([(Ping(n), dispatch(f"key-{n}" if n % 2 else None))
                            for n in range(50)])
        assert queue.complete(queue.claim(QUEUE))
        assert queue.claim(QUEUE) is not None
        fresh.execute_sql(f"CREATE INDEX operator_by_tenant ON {JOBS_TABLE} (tenant_id)")
        rows, indexes = _stored_jobs(fresh), _indexes(fresh, JOBS_TABLE)
        assert ("operator_by_tenant", ("tenant_id",), False, None) in indexes

        assert migrate(fresh, target="0005_cluster_jobs_by_id") == ["0005_cluster_jobs_by_id"]
        assert _without_rowid(fresh)
        assert _stored_jobs(fresh) == rows
        assert _indexes(fresh, JOBS_TABLE) == indexes
        assert queue.enqueue(Ping(1), dispatch("key-1")).already_enqueued
        assert queue.enqueue_many([(Ping(50), dispatch())])[0].already_enqueued is False
        assert len({queue.claim(QUEUE).job_id for _ in range(49)}) == 49
        assert queue.claim(QUEUE) is None

        rows = _stored_jobs(fresh)
        assert runner(fresh).down() == ["0005_cluster_jobs_by_id"]
        assert not _without_rowid(fresh)
        assert _stored_jobs(fresh) == rows
        assert _indexes(fresh, JOBS_TABLE) == indexes


def _cli(*args):
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "caravel_lite", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_command_line_migrate_and_check(new_database):
    url = new_database()
    check = _cli("check", "--database", url)
    assert check.returncode == 1, check.stderr
    assert json.loads(check.stdout.strip().splitlines()[-1])["pending_migrations"] is True
    done = _cli("migrate", "--database", url)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"applied": ALL}
    again = _cli("migrate", "--database", url)
    assert json.loads(again.stdout.strip().splitlines()[-1]) == {"applied": []}
    check = _cli("check", "--database", url)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout.strip().splitlines()[-1]) == {"pending_migrations": False}


def test_0006_keeps_earlier_jobs_which_then_gain_a_failure_history(fresh, backend):
    """Jobs written under 0005 (a dead letter, a job between retries, a completed
    one) survive 0006 unchanged; the operator views list them with an empty history
    and their last category; their next failure is recorded as the first; 0006 can
    be reverted and applied again."""
    from caravel_lite import Failure, QueueAdmin

    assert runner(fresh).up("0005_cluster_jobs_by_id") == ALL[:5]
    clock = _Clock(T0)
    queue = make_queue(fresh, clock=clock, max_attempts=2)
    with code_before_0008(queue):
        retrying = queue.enqueue(Ping(1), dispatch()).job_id
        # 0005's fail() wrote only the category (there was no history table): simulate
        # such rows by failing through the UPDATE alone.
        lease = queue.claim(QUEUE)
        assert queue._fenced(OLD_RETRY.format(p=fresh.param),
                             (T0_MS + 1000, "handler_failed", T0_MS, str(lease.job_id),
                              lease._token, T0_MS)) == 1
        done = queue.enqueue(Ping(2), dispatch()).job_id
        assert queue.complete(queue.claim(QUEUE))
    before = _stored_jobs(fresh)

    assert migrate(fresh) == ALL[5:]
    assert _stored_jobs(fresh) == before
    admin = QueueAdmin(fresh, clock=clock)
    listed = {job.job_id: job for job in admin.jobs()}
    assert set(listed) == {retrying, done}
    assert listed[retrying].last_failure is Failure.HANDLER_FAILED
    assert admin.job(retrying).failures == ()
    clock.now = T0 + timedelta(seconds=1)
    lease = queue.claim(QUEUE)
    assert lease.job_id == retrying and lease.attempt == 2
    assert queue.fail(lease, Failure.INVALID_PAYLOAD, error=ValueError("secret"))
    (record,) = admin.job(retrying).failures
    assert (record.seq, record.attempt, record.category, record.error_type) == (
        1, 2, Failure.INVALID_PAYLOAD, "ValueError")
    assert runner(fresh).down("0006_failure_history") == ALL[5:][::-1]
    assert FAILURES_TABLE not in fresh.get_tables()
    assert migrate(fresh) == ALL[5:]
    assert _indexes(fresh, JOBS_TABLE) == expected_indexes(backend)[JOBS_TABLE]


def test_0007_listings_leave_pending_jobs_out_and_can_be_reverted(fresh, backend,
                                                                 monkeypatch):
    """Where indexes can be partial, 0007 rebuilds the two listing indexes without
    pending jobs (down restores 0006's, holding every job); the operator listings
    of pending jobs, by queue and by tenant, answer the same before and after."""
    import caravel_lite.admin as admin_module
    from caravel_lite import QueueAdmin

    # The listings as they read before 0009 added the columns of progress and cancel.
    monkeypatch.setattr(admin_module, "CONTROL_COLUMNS", "")
    monkeypatch.setattr(admin_module, "control_fields", lambda row, start: {})

    assert runner(fresh).up("0006_failure_history") == ALL[:6]
    with code_before_0008(make_queue(fresh)) as queue:
        queue.enqueue_many([(Ping(n), dispatch()) for n in range(20)])
        assert queue.complete(queue.claim(QUEUE))
    admin = QueueAdmin(fresh)

    def listings():
        return ([j.job_id for j in admin.jobs(queue=QUEUE, state="pending").jobs],
                [j.job_id for j in admin.jobs(tenant_id=TENANT, state="pending").jobs],
                [j.job_id for j in admin.jobs(tenant_id=TENANT).jobs])

    before = listings()
    assert len(before[0]) == 19 and before[0] == before[1]
    assert before[0] == sorted(before[0], key=str, reverse=True)
    assert migrate(fresh, target="0007_listings_without_pending") == [
        "0007_listings_without_pending"]
    assert _indexes(fresh, JOBS_TABLE) == _as_of_0007(
        PARTIAL_JOB_INDEXES if backend in PARTIAL_BACKENDS else FULL_JOB_INDEXES,
        backend in PARTIAL_BACKENDS)
    assert listings() == before
    if backend in PARTIAL_BACKENDS:
        entries = _index_entries(fresh, backend)
        assert entries["caravel_jobs_queue_state_id"] == 1  # the completed job
        assert entries["caravel_jobs_tenant_id_state_id"] == 1
    assert runner(fresh).down("0007_listings_without_pending") == ["0007_listings_without_pending"]
    assert _indexes(fresh, JOBS_TABLE) == _as_of_0006(
        PARTIAL_JOB_INDEXES if backend in PARTIAL_BACKENDS else FULL_JOB_INDEXES)
    assert listings() == before


T0_MS = int(T0.timestamp() * 1000)
# fail()'s retry statement before migration 0009 (which added the cancel request it
# now checks).
OLD_RETRY = ("UPDATE caravel_jobs SET state = 'pending', available_at = {p}, "
             "last_failure = {p}, lease_token = NULL, lease_expires_at = NULL, "
             "updated_at = {p} WHERE id = {p} AND state = 'leased' AND lease_token = {p} "
             "AND lease_expires_at > {p}")
