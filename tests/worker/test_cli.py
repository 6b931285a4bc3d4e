"""The command-line worker as a subprocess: drain, SIGTERM, unmigrated, faulted."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import List

from caravel_lite import DatabaseQueue, JobState, migrate
from caravel_lite.dialect import open_database

from tests.support import wait_for
from tests.worker.helpers import QUEUE, enqueue, options, status
from tests.worker.jobs import Block, Note, registry

ROOT = Path(__file__).resolve().parents[2]


def start(url: str, *extra: str, env: dict = None) -> subprocess.Popen:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    command: List[str] = [sys.executable, "-m", "caravel_lite", "worker",
                          "tests.worker.jobs:registry", "--queue", QUEUE,
                          "--database", url, "--poll-interval", "0.1", *extra]
    return subprocess.Popen(command, env=environment, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen) -> tuple:
    try:
        _, err = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, err


def test_drains_the_queue_and_exits_0_on_sigterm_mid_job(db, db_url, tmp_path):
    queue = DatabaseQueue(db, registry, options())
    notes = [enqueue(queue, Note(f"n{i}")) for i in range(3)]
    ready = tmp_path / "ready"
    process = start(db_url, "--lease-seconds", "60",
                    env={"CARAVEL_TEST_READY": str(ready)})
    try:
        wait_for(lambda: queue.counts(QUEUE).completed == 3, timeout=20,
                 message="the worker to drain three jobs")
        blocked = enqueue(queue, Block("hold"))
        wait_for(ready.exists, timeout=20, message="the blocking handler to start")
        assert ready.read_text() == str(blocked)
        process.send_signal(signal.SIGTERM)
    finally:
        code, err = finish(process)
    assert code == 0, err
    assert "Traceback" not in err
    assert all(status(queue, job).state is JobState.COMPLETED for job in notes)
    found = status(queue, blocked)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)


def test_unmigrated_database_exits_1_with_one_line(new_database):
    code, err = finish(start(new_database()))
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "pending migrations" in lines[0], err


def test_an_infrastructure_fault_exits_1_with_one_line(new_database):
    url = new_database()
    database = open_database(url)
    with database.connection_context():
        migrate(database)
    process = start(url)
    try:
        # Whether the worker is already polling or not, its next claim fails.
        with database.connection_context():
            database.execute_sql("DROP TABLE caravel_jobs")
    finally:
        code, err = finish(process)
    assert code == 1
    assert "Traceback" not in err
    faults = [line for line in err.splitlines() if line.startswith("caravel-lite worker:")]
    assert len(faults) == 1 and "worker faulted" in faults[0], err
