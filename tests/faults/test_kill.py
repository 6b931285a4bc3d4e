"""Issue #7, faults 2 and 3: workers killed with SIGKILL at chosen points of a job, in
a loop of at least 50 kills; and a job whose handler kills its own process on every
attempt. Workers use a 1 s lease so that a killed worker's job comes back quickly."""
from __future__ import annotations

import os
import random
import signal
from datetime import timedelta
from pathlib import Path
from typing import Dict, List

import pytest

from caravel_lite import DatabaseQueue, Dispatch, Failure, JobState, Priority, QueueOptions
from tests.faults import jobs, report
from tests.faults.jobs import QUEUE, TENANT, Work, audit
from tests.faults.procs import Children
from tests.faults.scenario import open_jobs
from tests.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]

KILLS = 50
WORKERS = 3
# Where a kill is aimed, in turn: after the claim (before the handler), inside the
# handler, after the handler committed its effect, and during the acknowledgement.
TARGETS = (("claimed", "handler"), ("handler",), ("committed",), ("acking",))


def _queue(db, max_attempts: int = 100) -> DatabaseQueue:
    return DatabaseQueue(db, jobs.registry, QueueOptions(
        lease_duration=timedelta(seconds=1), max_attempts=max_attempts,
        retry_delay=timedelta(milliseconds=50)))


def _read_phase(path: Path) -> str:
    try:
        return path.read_bytes().decode(errors="replace").strip()
    except FileNotFoundError:
        return ""


def test_kill_9_at_random_points_loses_nothing(backend, fault_db, db_url, tmp_path):
    queue = _queue(fault_db)
    accepted: List[str] = []
    counter = iter(range(1, 1_000_000))

    def top_up(minimum: int = 30) -> None:
        while open_jobs(fault_db, accepted) < minimum:
            n = next(counter)
            accepted.append(str(queue.enqueue(Work(n, work_ms=3), Dispatch(
                queue=QUEUE, tenant_id=TENANT, idempotency_key=f"k-{n}")).job_id))

    rng = random.Random(7)
    phases_at_kill: Dict[str, int] = {}
    with Children(tmp_path) as children:
        def start_worker():
            phase_file = tmp_path / f"phase-{len(children.children)}"
            child = children.start(["worker", "--url", db_url, "--lease", "1",
                                    "--poll", "0.1", "--phase-file", str(phase_file),
                                    "--ack-delay", "0.003"])
            return child, phase_file

        workers = [start_worker() for _ in range(WORKERS)]
        for kill in range(KILLS):
            top_up()
            target = TARGETS[kill % len(TARGETS)]
            order = rng.sample(range(WORKERS), WORKERS)  # which worker, at random

            def in_target():
                for slot in order:
                    if _read_phase(workers[slot][1]) in target:
                        return slot + 1
                return None
            try:
                slot = wait_for(in_target, timeout=1.5, interval=0.001) - 1
            except AssertionError:
                slot = order[0]  # not seen in time: kill one wherever it is
            child, phase_file = workers[slot]
            assert child.popen.poll() is None, f"worker died by itself: {child.stderr()[-1500:]}"
            os.kill(child.pid, signal.SIGKILL)
            child.popen.wait()
            where = _read_phase(phase_file) or "starting"
            phases_at_kill[where] = phases_at_kill.get(where, 0) + 1
            workers[slot] = start_worker()
        wait_for(lambda: open_jobs(fault_db, accepted) == 0, timeout=60, interval=0.05,
                 message="the jobs of killed workers to be finished")
        # A worker still importing has no SIGTERM handler yet: wait until each one runs.
        wait_for(lambda: all(_read_phase(f) for _, f in workers), timeout=30,
                 message="the last workers to start")
        survivors = [child for child, _ in workers]
        children.terminate(survivors)
        exit_codes = [child.popen.returncode for child in survivors]
    result = audit(fault_db, accepted)
    report.add(backend, "kills", KILLS)
    report.add(backend, "jobs_processed", result.completed)
    report.add(backend, "lost", len(result.lost))
    report.add(backend, "double_applied", len(result.double_applied))
    report.note(f"kill -9 on {backend}: {KILLS} kills by phase {dict(sorted(phases_at_kill.items()))}, "
                f"{result.rerun} re-runs")
    result.assert_clean()
    assert exit_codes == [0] * WORKERS
    # The loop really hit the dangerous windows.
    assert phases_at_kill.get("handler", 0) + phases_at_kill.get("claimed", 0) > 0
    assert phases_at_kill.get("committed", 0) > 0
    assert phases_at_kill.get("acking", 0) > 0


def test_crash_looping_job_is_dead_lettered_and_healthy_jobs_complete(
        backend, fault_db, db_url, tmp_path):
    queue = _queue(fault_db, max_attempts=3)
    crash_id = queue.enqueue(Work(0, crash=True), Dispatch(
        queue=QUEUE, tenant_id=TENANT, priority=Priority.CRITICAL)).job_id
    healthy = [str(queue.enqueue(Work(n), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id)
               for n in range(1, 11)]
    restarts = 0
    with Children(tmp_path) as children:
        workers = [children.start(["worker", "--url", db_url, "--lease", "1",
                                   "--poll", "0.1"]) for _ in range(2)]

        def settled() -> bool:
            nonlocal restarts
            for i, child in enumerate(workers):
                if child.popen.poll() is not None:
                    assert child.popen.returncode == -signal.SIGKILL, child.stderr()[-1500:]
                    restarts += 1
                    workers[i] = children.start(["worker", "--url", db_url, "--lease", "1",
                                                 "--poll", "0.1"])
            status = queue.status(crash_id, queue=QUEUE, tenant_id=TENANT)
            return status.state is JobState.DEAD_LETTER and open_jobs(fault_db, healthy) == 0

        wait_for(settled, timeout=60, interval=0.05, message="the crash loop to settle")
        children.terminate(workers)
    status = queue.status(crash_id, queue=QUEUE, tenant_id=TENANT)
    result = audit(fault_db, healthy)
    report.add(backend, "kills", restarts)
    report.add(backend, "jobs_processed", result.completed)
    report.add(backend, "lost", len(result.lost))
    report.add(backend, "double_applied", len(result.double_applied))
    assert status.last_failure is Failure.ATTEMPTS_EXHAUSTED
    assert status.attempts == 3
    assert restarts == 3, "each attempt should have killed exactly one worker"
    result.assert_clean()
