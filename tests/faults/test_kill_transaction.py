"""Issue #24: exactly-once effects through ctx.transaction() under kill -9. Workers are
killed inside the handler's block (before its commit) and right after the commit, in a
loop; the ``Tally`` handler writes its effect with no check at all (no results-table
lookup, no key), so a job run again after its effect committed would show two rows.
Every accepted job completes with exactly one effect: 0 doubled, 0 lost."""
from __future__ import annotations

import os
import random
import signal
from pathlib import Path
from typing import Dict, List

import pytest

from caravel_lite import Dispatch
from tests.faults import jobs, report
from tests.faults.jobs import QUEUE, TENANT, Tally
from tests.faults.procs import Children
from tests.faults.scenario import open_jobs
from tests.faults.test_kill import _queue, _read_phase
from tests.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]

KILLS = 10
WORKERS = 2
# Inside the block (its write done, not committed), and right after its commit.
TARGETS = (("handler",), ("committed",))


def test_kill_9_around_the_commit_doubles_no_effect(backend, fault_db, db_url, tmp_path):
    queue = _queue(fault_db)
    accepted: List[str] = []
    counter = iter(range(1, 1_000_000))

    def top_up(minimum: int = 10) -> None:
        while open_jobs(fault_db, accepted) < minimum:
            n = next(counter)
            accepted.append(str(queue.enqueue(Tally(n, work_ms=5), Dispatch(
                queue=QUEUE, tenant_id=TENANT)).job_id))

    rng = random.Random(24)
    phases_at_kill: Dict[str, int] = {}
    with Children(tmp_path) as children:
        def start_worker():
            phase_file = tmp_path / f"phase-{len(children.children)}"
            child = children.start(["worker", "--url", db_url, "--lease", "1",
                                    "--poll", "0.1", "--phase-file", str(phase_file)])
            return child, phase_file

        workers = [start_worker() for _ in range(WORKERS)]
        for kill in range(KILLS):
            top_up()
            target = TARGETS[kill % len(TARGETS)]
            order = rng.sample(range(WORKERS), WORKERS)

            def in_target():
                for slot in order:
                    if _read_phase(workers[slot][1]) in target:
                        return slot + 1
                return None
            try:
                # Long enough for a restarted worker to start on a loaded machine.
                slot = wait_for(in_target, timeout=10, interval=0.001) - 1
            except AssertionError:
                slot = order[0]
            child, phase_file = workers[slot]
            assert child.popen.poll() is None, f"worker died by itself: {child.stderr()[-1500:]}"
            os.kill(child.pid, signal.SIGKILL)
            child.popen.wait()
            where = _read_phase(phase_file) or "starting"
            phases_at_kill[where] = phases_at_kill.get(where, 0) + 1
            workers[slot] = start_worker()
        wait_for(lambda: open_jobs(fault_db, accepted) == 0, timeout=60, interval=0.05,
                 message="the jobs of killed workers to be finished")
        wait_for(lambda: all(_read_phase(f) for _, f in workers), timeout=30,
                 message="the last workers to start")
        children.terminate([child for child, _ in workers])
    counts = jobs.tallies(fault_db)
    states = dict(fault_db.execute_sql(
        f"SELECT id, state FROM caravel_jobs WHERE queue = {fault_db.param}",
        (QUEUE,)).fetchall())
    doubled = [job_id for job_id, count in counts.items() if count > 1]
    lost = [job_id for job_id in accepted
            if states.get(job_id) != "completed" or counts.get(job_id) != 1]
    report.add(backend, "kills", KILLS)
    report.add(backend, "jobs_processed", len(accepted) - len(lost))
    report.add(backend, "lost", len(lost))
    report.add(backend, "double_applied", len(doubled))
    report.note(f"kill -9 around ctx.transaction() on {backend}: {len(accepted)} jobs, "
                f"kills by phase {dict(sorted(phases_at_kill.items()))}, "
                f"{len(doubled)} doubled effects, {len(lost)} lost")
    assert not doubled, f"doubled effects: {doubled[:5]}"
    assert not lost, f"lost: {lost[:5]}"
    assert phases_at_kill.get("handler", 0) > 0 and phases_at_kill.get("committed", 0) > 0
