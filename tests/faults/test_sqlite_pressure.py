"""Issue #7, fault 9: one SQLite file, 4 worker processes and an enqueuer, a short
busy timeout (20 ms). No "database is locked" may reach a caller; nothing is lost."""
from __future__ import annotations

import pytest

from tests.faults import report
from tests.faults.jobs import audit
from tests.faults.procs import Children
from tests.faults.scenario import run_load

pytestmark = [pytest.mark.slow, pytest.mark.faults]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_sqlite_file_under_pressure(backend, fault_db, db_url, tmp_path):
    args = ["--busy-ms", "20"]
    with Children(tmp_path) as children:
        load = run_load(children, db_url, workers=4, enqueuers=1, seconds=3, db=fault_db,
                        worker_args=args, enqueue_args=args + ["--work-ms", "2"])
    result = audit(fault_db, load.accepted)
    report.add(backend, "jobs_processed", result.completed)
    report.add(backend, "transient_retries", load.transient_retries)
    report.add(backend, "lost", len(result.lost))
    report.add(backend, "double_applied", len(result.double_applied))
    report.note(f"sqlite pressure: {result.completed} jobs, {load.transient_retries} "
                f"lock conflicts retried, none reached a caller")
    assert load.problems(result) == []
