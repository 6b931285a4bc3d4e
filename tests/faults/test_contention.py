"""Issue #7, fault 1: 8 worker processes and 2 enqueuer processes on one queue."""
from __future__ import annotations

import pytest

from tests.faults import report
from tests.faults.jobs import audit
from tests.faults.procs import Children
from tests.faults.scenario import run_load

pytestmark = [pytest.mark.slow, pytest.mark.faults]

LOAD_SECONDS = 3.0


def test_contention_every_job_completed_exactly_once(backend, fault_db, db_url, tmp_path):
    with Children(tmp_path) as children:
        load = run_load(children, db_url, workers=8, enqueuers=2, seconds=LOAD_SECONDS,
                        db=fault_db)
    result = audit(fault_db, load.accepted)
    report.add(backend, "jobs_processed", result.completed)
    report.add(backend, "transient_retries", load.transient_retries)
    report.add(backend, "lost", len(result.lost))
    report.add(backend, "double_applied", len(result.double_applied))
    report.note(f"contention on {backend}: {len(load.accepted)} jobs, "
                f"{result.completed / load.seconds:.0f} jobs/s, "
                f"{load.transient_retries} transient errors retried")
    assert load.accepted, "the enqueuers accepted nothing"
    assert not load.caller_errors, f"errors reached a caller: {load.caller_errors[:3]}"
    assert load.worker_exit_codes == [0] * 8
    result.assert_clean()
    assert result.rerun == 0, "a job ran twice without any fault"
