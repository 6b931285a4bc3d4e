"""``python -m caravel_lite relay`` as a user runs it: a subprocess."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from caravel_lite import Dispatch, QueueOutbox, migrate
from caravel_lite.dialect import open_database
from tests.outbox.jobs import SendInvoice, build_registry
from tests.support import wait_for

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "tests.outbox.jobs:registry"


def relay_command(app_url: str, queue_url: str, *extra: str) -> list:
    return [sys.executable, "-m", "caravel_lite", "relay", REGISTRY,
            "--app-database", app_url, "--database", queue_url, *extra]


def stage_some(db) -> list:
    outbox = QueueOutbox(db, build_registry())
    with db.atomic():
        staged = [outbox.stage(SendInvoice(n), Dispatch("billing", "tenant-a", f"cli-{n}"))
                  for n in (1, 2)]
        db.execute_sql("INSERT INTO caravel_outbox (id, queue, tenant_id, wire_name, payload, "
                       "priority, available_at, max_attempts, staged_at) VALUES "
                       f"({', '.join([db.param] * 9)})",
                       ("00000000-0000-4000-8000-000000000001", "billing", "tenant-a",
                        "billing.unknown.v1", "{}", 2, 0, 3, 0))
    return staged


def test_once_dispatches_and_reports_counts(db, db_url):
    staged = stage_some(db)
    done = subprocess.run(relay_command(db_url, db_url, "--once", "--batch-size", "10"),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"marked": 2, "pending": 0, "dispatched": 2,
                                       "set_aside": 1,
                                       "set_aside_reasons": {"unknown_job_type": 1}}
    jobs = {row[0] for row in db.execute_sql("SELECT id FROM caravel_jobs").fetchall()}
    assert jobs == {str(s.outbox_id) for s in staged}


def test_sigterm_stops_the_running_relay_cleanly(db, db_url, tmp_path):
    log = tmp_path / "relay.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(relay_command(db_url, db_url, "--poll-interval", "0.05"),
                                   cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        wait_for(lambda: "outbox relay started" in log.read_text(), timeout=30,
                 message="the relay to start")
        stage_some(db)
        wait_for(lambda: db.execute_sql("SELECT COUNT(*) FROM caravel_jobs").fetchone()[0] == 2,
                 timeout=30, message="the running relay to dispatch")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert "outbox relay stopped" in log.read_text()


def test_an_unreachable_queue_database_exits_1_with_one_line(tmp_path):
    app_url = f"sqlite:///{tmp_path / 'app.sqlite'}"
    app = open_database(app_url)
    with app.connection_context():
        migrate(app)
    missing = f"sqlite:///{tmp_path / 'no-such-directory' / 'queue.sqlite'}"
    # --max-outage 0: the first failure ends the relay (the default waits 60 s for a
    # database that went away).
    done = subprocess.run(relay_command(app_url, missing, "--max-outage", "0"), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("caravel-lite relay: relay faulted: "
                                                   "OperationalError"), done.stderr
    assert not os.path.exists(tmp_path / "no-such-directory")
