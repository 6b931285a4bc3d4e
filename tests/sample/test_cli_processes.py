"""The CLI as separate processes: crash and recovery on every backend, SIGTERM mid-job
and the --demo story on SQLite. The full smoke story runs from samples/smoke.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

from tests.sample.helpers import ROOT, json_of, run_process, target_environment
from tests.support import wait_for


def test_crash_after_saving_a_result_then_recovery_after_the_lease(backend, tmp_path,
                                                                    new_database):
    env = target_environment(backend, tmp_path, new_database)
    assert json_of(run_process("--migrate", env))["applied"]
    first = json_of(run_process("--enqueue-demo", env))
    assert [job["already_enqueued"] for job in first] == [False] * 3
    crashed = run_process("--work-once", env, {"CARAVEL_WORKER_CRASH_AFTER_RESULT": "1",
                                                "CARAVEL_WORKER_LEASE_SECONDS": "1"})
    assert crashed.returncode == 73, crashed.stderr
    assert json_of(run_process("--report", env))["events"] == 1
    wait_for(lambda: json_of(run_process("--queue-status", env))["expired_leases"] == 1,
             timeout=30, interval=0.2, message="the crashed job's lease to expire")
    claimed = [json_of(run_process("--work-once", env))["claimed"] for _ in range(4)]
    assert claimed == [True, True, True, False]
    assert json_of(run_process("--report", env)) == {"events": 3, "total": 6}
    again = json_of(run_process("--enqueue-demo", env))
    assert [job["job_id"] for job in again] == [job["job_id"] for job in first]
    assert all(job["already_enqueued"] for job in again)


def test_sigterm_mid_job_exits_0_and_leaves_the_job_leased(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    env = {"CARAVEL_WORKER_DIRECTORY": str(data)}
    json_of(run_process("--migrate", env))
    json_of(run_process("--enqueue-demo", env))
    ready, cancelled = tmp_path / "ready", tmp_path / "cancelled"
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(("CARAVEL_WORKER_", "CARAVEL_SMOKE_"))}
    environment.update(env, PYTHONPATH=str(ROOT), CARAVEL_SMOKE_SIGTERM_READY=str(ready),
                       CARAVEL_SMOKE_SIGTERM_CANCELLED=str(cancelled),
                       CARAVEL_WORKER_LEASE_SECONDS="30")
    worker = subprocess.Popen([sys.executable, "-m", "caravel_lite.sample", "--work"],
                              env=environment, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: ready.exists() or worker.poll() is not None, timeout=30,
                 message="the handler to save its result")
        assert worker.poll() is None, worker.stderr.read()
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    assert ready.read_text() == cancelled.read_text()
    status = json_of(run_process("--queue-status", env))
    assert (status["active_leases"], status["ready"], status["completed"]) == (1, 2, 0)
    assert json_of(run_process("--report", env))["events"] == 1


def test_demo_tells_the_story_in_its_own_directory_and_ends_with_the_report(tmp_path):
    done = run_process("--demo", {}, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == {"events": 3, "total": 6}
    assert any("exit code 73" in line for line in lines)
    assert list(tmp_path.iterdir()) == []
