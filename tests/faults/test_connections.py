"""Issue #7, fault 4: the database kills the worker's connections (PostgreSQL
pg_terminate_backend, MariaDB KILL CONNECTION), once while the command-line worker is
idle and once while a handler runs. Documented behaviour (since issue #12 item 5: a
database opened by open_database replaces a dropped connection on its next statement
outside a transaction): the same worker process logs the reconnect and carries on;
nothing is lost or applied twice. Only connections to this test's own database are
killed, never the test's own."""
from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest

from caravel_lite import DatabaseQueue, Dispatch, QueueOptions
from tests.faults import jobs, report
from tests.faults.jobs import QUEUE, TENANT, Work, audit
from tests.faults.procs import Children
from tests.faults.scenario import open_jobs
from tests.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]


def _others(db, name):
    if db.param == "%s" and "Postgres" in type(db).__name__:
        return [r[0] for r in db.execute_sql(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,)).fetchall()]
    return [r[0] for r in db.execute_sql(
        "SELECT id FROM information_schema.processlist WHERE db = %s "
        "AND id <> CONNECTION_ID()", (name,)).fetchall()]


def _kill_others(db, name) -> int:
    victims = _others(db, name)
    for victim in victims:
        if "Postgres" in type(db).__name__:
            db.execute_sql("SELECT pg_terminate_backend(%s)", (victim,))
        else:
            try:
                db.execute_sql(f"KILL CONNECTION {int(victim)}")
            except Exception:
                pass  # it had already gone
    return len(victims)


def _worker(children, url):
    # INFO, so that the test can see the worker enter its loop: killing its connection
    # earlier (while it checks the schema) is a start-up failure, not the fault tested.
    return children.start(["worker", "tests.faults.jobs:registry", "--queue", QUEUE,
                           "--database", url, "--lease-seconds", "2",
                           "--poll-interval", "0.1", "--log-level", "INFO"],
                          module="caravel_lite")


def _running(child) -> bool:
    return "worker started on queue" in child.stderr()


def _carries_on(child, fault_db, accepted):
    """The worker finishes every accepted job, is still running, and said why."""
    try:
        wait_for(lambda: open_jobs(fault_db, accepted) == 0, timeout=30,
                 message="the same worker to finish every job")
    except AssertionError as exc:
        states = fault_db.execute_sql("SELECT state, attempts, lease_expires_at FROM "
                                      "caravel_jobs WHERE state <> 'completed'").fetchall()
        raise AssertionError(f"{exc}; open jobs {states}; worker log:\n"
                             f"{child.stderr()}") from None
    assert child.popen.poll() is None, child.stderr()
    assert "Traceback" not in child.stderr(), child.stderr()


@pytest.mark.parametrize("backend", ["postgres", "mysql"], indirect=True)
def test_connection_killed_idle_and_mid_job(backend, fault_db, db_url, tmp_path):
    name = urlsplit(db_url).path.lstrip("/")
    queue = DatabaseQueue(fault_db, jobs.registry, QueueOptions(
        lease_duration=timedelta(seconds=2)))
    accepted = []
    with Children(tmp_path, env={"CARAVEL_FAULT_URL": db_url}) as children:
        worker = _worker(children, db_url)
        wait_for(lambda: _running(worker) and _others(fault_db, name), timeout=20,
                 message="the worker to enter its loop")
        assert _kill_others(fault_db, name) >= 1  # idle
        accepted.append(str(queue.enqueue(Work(0), Dispatch(queue=QUEUE,
                                                            tenant_id=TENANT)).job_id))
        _carries_on(worker, fault_db, accepted)
        assert "database connection lost" in worker.stderr(), worker.stderr()

        # Mid-job: the handler has recorded its start and is working.
        accepted.append(str(queue.enqueue(Work(1, work_ms=1500),
                                          Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id))
        wait_for(lambda: fault_db.execute_sql(
            f"SELECT COUNT(*) FROM {jobs.RUNS}").fetchone()[0] >= 2,
            timeout=20, message="the handler to start")
        assert _kill_others(fault_db, name) >= 1
        accepted += [str(queue.enqueue(Work(n), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id)
                     for n in range(2, 12)]
        _carries_on(worker, fault_db, accepted)
        children.terminate([worker])
        assert worker.popen.returncode == 0, worker.stderr()
    result = audit(fault_db, accepted)
    report.add(backend, "jobs_processed", result.completed)
    report.add(backend, "lost", len(result.lost))
    report.add(backend, "double_applied", len(result.double_applied))
    result.assert_clean()
