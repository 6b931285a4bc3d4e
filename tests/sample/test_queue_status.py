"""--queue-status on SQLite: read-only, creates nothing, prints only counts."""
from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from caravel_lite import DatabaseQueue, Failure, JobRegistry, QueueOptions, migrate
from caravel_lite.sample import QUEUE, TENANT, WIRE_NAME, RecordQuantity
from caravel_lite.sample.app import SampleApp
from caravel_lite.sample.config import SampleConfig
from caravel_lite.values import Dispatch

from tests.sample.helpers import json_of, run_in_process, run_process, target_environment

COUNT_KEYS = ["observed_at", "ready", "delayed", "active_leases", "expired_leases",
              "dead_letter", "completed"]


@pytest.fixture
def directory(monkeypatch, tmp_path):
    monkeypatch.delenv("CARAVEL_WORKER_DATABASE_URL", raising=False)
    monkeypatch.setenv("CARAVEL_WORKER_DIRECTORY", str(tmp_path))
    return tmp_path


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_missing_database_fails_and_is_not_created(directory):
    code, out, err = run_in_process(["--queue-status"])
    assert code != 0 and out == ""
    assert "queue.db does not exist" in err
    assert list(directory.iterdir()) == []


def test_an_unmigrated_database_fails_and_is_left_unchanged(directory):
    path = directory / "queue.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE unrelated (id INTEGER)")
    raw.close()
    before = digest(path)
    code, out, err = run_in_process(["--queue-status"])
    assert code != 0 and out == ""
    assert "0001_create_jobs" in err
    assert digest(path) == before
    assert not (directory / "results.db").exists()


def test_counts_are_read_without_writing_or_creating_the_results_database(directory):
    app = SampleApp(SampleConfig(directory=str(directory)))
    with app.queue_db.connection_context():
        migrate(app.queue_db)
        app.queue.enqueue(RecordQuantity(1), Dispatch(QUEUE, TENANT, "secret-key-1"))
        app.queue.enqueue(RecordQuantity(2), Dispatch(
            QUEUE, TENANT, "secret-key-2",
            not_before=datetime.now(timezone.utc) + timedelta(hours=1)))
    app.queue_db.close()
    path = directory / "queue.db"
    before = digest(path)
    code, out, err = run_in_process(["--queue-status"])
    assert code == 0, err
    status = json.loads(out)
    assert list(status) == COUNT_KEYS
    assert {k: v for k, v in status.items() if k != "observed_at"} == {
        "ready": 1, "delayed": 1, "active_leases": 0, "expired_leases": 0,
        "dead_letter": 0, "completed": 0}
    assert status["observed_at"].endswith("Z")
    assert "secret-key" not in out + err and "quantity" not in out + err
    assert digest(path) == before
    assert not (directory / "results.db").exists()
    # A read-only reader may create SQLite's side files, but writes nothing to the log.
    wal = directory / "queue.db-wal"
    assert not wal.exists() or wal.stat().st_size == 0


def test_only_the_samples_tenant_is_counted(backend, tmp_path, new_database):
    """Another tenant's jobs in the sample's queue, in every category, are not counted
    (#11.8); a database holding them reported ready: 2 for one ready sample job."""
    env = target_environment(backend, tmp_path, new_database)
    config = (SampleConfig(directory=str(tmp_path)) if backend == "sqlite"
              else SampleConfig(queue_url=env["CARAVEL_WORKER_DATABASE_URL"],
                                results_url=env["CARAVEL_WORKER_DATABASE_URL"]))
    app = SampleApp(config)
    registry = JobRegistry()
    registry.register(WIRE_NAME, RecordQuantity, lambda job, ctx: None)
    with app.queue_db.connection_context():
        migrate(app.queue_db)
        other = DatabaseQueue(app.queue_db, registry, QueueOptions(max_attempts=1))
        for name in ("completed", "dead", "leased"):
            other.enqueue(RecordQuantity(1), Dispatch(QUEUE, "another-tenant", name))
            lease = other.claim(QUEUE)
            if name == "completed":
                assert other.complete(lease)
            elif name == "dead":
                assert other.fail(lease, Failure.HANDLER_FAILED)
        other.enqueue(RecordQuantity(2), Dispatch(QUEUE, "another-tenant", "ready"))
        other.enqueue(RecordQuantity(3), Dispatch(
            QUEUE, "another-tenant", "delayed",
            not_before=datetime.now(timezone.utc) + timedelta(hours=1)))
        app.queue.enqueue(RecordQuantity(1), Dispatch(QUEUE, TENANT, "ours"))
    app.queue_db.close()
    status = json_of(run_process("--queue-status", env))
    assert {k: v for k, v in status.items() if k != "observed_at"} == {
        "ready": 1, "delayed": 0, "active_leases": 0, "expired_leases": 0,
        "dead_letter": 0, "completed": 0}
