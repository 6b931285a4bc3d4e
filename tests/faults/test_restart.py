"""Issue #7 fault 5, issue #12 item 5: the database server is stopped and started twice
under running workers (a private server this test starts on a free port; never the
shared ones). The same two worker processes ride out both outages (``max_outage``); the
test never reconnects on the application's behalf: the application's Database object
(from ``open_database``) enqueues again after each restart by itself. Enqueue during an
outage fails loudly; afterwards every accepted job completes exactly once."""
from __future__ import annotations

from datetime import timedelta

import peewee
import pytest

from caravel_lite import DatabaseQueue, Dispatch, QueueOptions, migrate
from caravel_lite.dialect import open_database, with_database_name
from tests.databases import in_ci
from tests.faults import jobs, report
from tests.faults.jobs import QUEUE, TENANT, Work, audit
from tests.faults.procs import Children
from tests.faults.scenario import open_jobs
from tests.faults.servers import PrivateMariaDB, PrivatePostgres
from tests.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.faults]

SERVERS = {"postgres": PrivatePostgres, "mysql": PrivateMariaDB}
CYCLES = 2
WORKER = ["worker", "--lease", "2", "--max-outage", "120"]


@pytest.mark.parametrize("kind", ["postgres", "mysql"])
def test_database_restart(kind, tmp_path):
    server_class = SERVERS[kind]
    reason = server_class.missing()
    if reason is not None:
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    server = server_class()
    db = None
    try:
        server.start()
        admin = open_database(server.url)
        with admin.connection_context():
            admin.execute_sql("CREATE DATABASE caravel_restart")
        url = with_database_name(server.url, "caravel_restart")
        # The application's Database object: connected once, never reopened by the test.
        db = open_database(url)
        migrate(db)
        jobs.create_tables(db)
        queue = DatabaseQueue(db, jobs.registry, QueueOptions(lease_duration=timedelta(seconds=2)))
        accepted, refused, restarts = [], 0, 0
        counter = iter(range(1, 1_000_000))

        def enqueue_some(count):
            for _ in range(count):
                n = next(counter)
                accepted.append(str(queue.enqueue(Work(n, work_ms=5), Dispatch(
                    queue=QUEUE, tenant_id=TENANT, idempotency_key=f"k-{n}")).job_id))

        with Children(tmp_path, env={"CARAVEL_FAULT_URL": url}) as children:
            workers = [children.start([*WORKER, "--url", url]) for _ in range(2)]
            pids = [child.pid for child in workers]
            # Both running before the first outage: one still starting up (its queue
            # connects on construction) would meet the stopped server, not ride it out.
            wait_for(lambda: all(child.ready() for child in workers), timeout=60,
                     message="both workers to start")

            def alive() -> None:
                for child in workers:
                    assert child.popen.poll() is None, (
                        f"a worker exited with {child.popen.returncode}: "
                        + child.stderr()[-1500:])

            for _ in range(CYCLES):
                enqueue_some(30)
                wait_for(lambda: (alive(), open_jobs(db, accepted) < 20)[1], timeout=60)
                server.stop()
                for _ in range(5):
                    with pytest.raises(peewee.PeeweeException):
                        enqueue_some(1)
                    refused += 1
                server.start()
                restarts += 1
                enqueue_some(10)  # the same Database object, after the restart
                alive()
            wait_for(lambda: (alive(), open_jobs(db, accepted) == 0)[1], timeout=120,
                     message="the same workers to finish every accepted job")
            assert [child.pid for child in workers] == pids
            children.terminate(workers)
            assert [child.popen.returncode for child in workers] == [0, 0]
        result = audit(db, accepted)
        report.add(kind, "restarts", restarts)
        report.add(kind, "jobs_processed", result.completed)
        report.add(kind, "lost", len(result.lost))
        report.add(kind, "double_applied", len(result.double_applied))
        report.note(f"restart on {kind}: {restarts} restarts ridden out by the same two "
                    f"workers, {refused} enqueues refused during outages, "
                    f"{len(accepted)} accepted jobs completed once")
        result.assert_clean()
    finally:
        if db is not None:
            db.close()
        server.remove()
