"""The sample's second handler (issue 24), every backend: tallies written in
ctx.transaction() with no check of their own; a crash right after the commit leaves
the job completed, never run again, and no tally is ever counted twice."""
from __future__ import annotations

from tests.sample.helpers import json_of, run_process, target_environment


def test_a_crash_after_the_commit_never_counts_a_tally_twice(backend, tmp_path, new_database):
    env = target_environment(backend, tmp_path, new_database)
    applied = json_of(run_process("--migrate", env))["applied"]
    assert "0001_create_tallies" in applied
    first = json_of(run_process("--enqueue-tallies", env))
    assert [job["already_enqueued"] for job in first] == [False] * 3
    crashed = run_process("--work-once", env, {"CARAVEL_WORKER_CRASH_AFTER_RESULT": "1",
                                                "CARAVEL_WORKER_LEASE_SECONDS": "1"})
    assert crashed.returncode == 73, crashed.stderr
    assert json_of(run_process("--tally-report", env)) == {"events": 1, "total": 1,
                                                            "doubled": 0}
    # Completed with its write: nothing leased, nothing to take over.
    status = json_of(run_process("--queue-status", env))
    assert (status["completed"], status["active_leases"], status["ready"]) == (1, 0, 2)
    claimed = [json_of(run_process("--work-once", env))["claimed"] for _ in range(3)]
    assert claimed == [True, True, False]
    assert json_of(run_process("--tally-report", env)) == {"events": 3, "total": 6,
                                                            "doubled": 0}
