"""The migration scripts build exactly the schema the runtime models describe, on
every database; applying them is idempotent; check_schema and the command line report
missing or pending migrations (SPEC §2)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from caravel_lite import SchemaNotReady, check_schema, migrate
from caravel_lite.dialect import dialect_of, open_database
from caravel_lite.migrator import pending_migrations, runner
from caravel_lite.schema import HISTORY_TABLE, JOBS_TABLE, OUTBOX_TABLE, bind_models

ALL = ["0001_create_jobs", "0002_create_outbox", "0003_notify_trigger"]

# The indexes the claim, the sweep, pruning, deduplication and the relay rely on.
EXPECTED_INDEXES = {
    JOBS_TABLE: {
        ("caravel_jobs_queue_state_priority_available_at_enqueued_at_id",
         ("queue", "state", "priority", "available_at", "enqueued_at", "id"), False),
        ("caravel_jobs_queue_state_lease_expires_at",
         ("queue", "state", "lease_expires_at"), False),
        ("caravel_jobs_state_finished_at", ("state", "finished_at"), False),
        ("caravel_jobs_dedup_key", ("dedup_key",), True),
    },
    OUTBOX_TABLE: {
        ("caravel_outbox_dispatched_at_set_aside_at_staged_at_id",
         ("dispatched_at", "set_aside_at", "staged_at", "id"), False),
        ("caravel_outbox_dedup_key", ("dedup_key",), True),
    },
}
INTEGER_64 = {"sqlite": "integer", "postgres": "bigint", "mysql": "bigint"}
EXACT_TEXT = ("queue", "tenant_id", "idempotency_key", "wire_name")


@pytest.fixture
def fresh(new_database):
    db = open_database(new_database())
    db.connect()
    yield db
    db.close()


def _indexes(db, table):
    return {(ix.name, tuple(ix.columns), bool(ix.unique)) for ix in db.get_indexes(table)
            if ix.name != "PRIMARY" and not ix.name.startswith(("sqlite_autoindex", table + "_pkey"))}


def _model_indexes(model):
    """(name, columns, unique) of every index the runtime model declares."""
    out = set()
    for index in model._meta.fields_to_index():
        columns = tuple(f.column_name for f in index._expressions)
        out.add((index._name, columns, bool(index._unique)))
    return out


def test_fresh_database_gets_exactly_the_runtime_schema(fresh, backend):
    assert migrate(fresh) == ALL
    assert sorted(fresh.get_tables()) == sorted([HISTORY_TABLE, JOBS_TABLE, OUTBOX_TABLE])
    for model in bind_models(fresh):
        table = model._meta.table_name
        columns = {c.name: c for c in fresh.get_columns(table)}
        assert set(columns) == set(model._meta.columns), table
        for name, field in model._meta.columns.items():
            assert columns[name].null == field.null, (table, name)
        assert [c for c in fresh.get_primary_keys(table)] == ["id"]
        assert _indexes(fresh, table) == EXPECTED_INDEXES[table]
        assert _model_indexes(model) == EXPECTED_INDEXES[table]


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
    before = {t: _indexes(fresh, t) for t in (JOBS_TABLE, OUTBOX_TABLE)}
    assert migrate(fresh) == []
    assert {t: _indexes(fresh, t) for t in (JOBS_TABLE, OUTBOX_TABLE)} == before
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
