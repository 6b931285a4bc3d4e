"""Concurrency limits across real processes: 4 worker processes of 4 threads each
never run more than N jobs of one key at once (the handlers count themselves in a
table of their own), and a killed worker's slot frees when its lease expires."""
from __future__ import annotations

import os
from collections import Counter

from caravel_lite import JobState
from tests.flow import procs
from tests.flow.jobs import QUEUE, Export, make_queue, to
from tests.support import wait_for

JOBS = 40


def test_four_processes_of_four_threads_never_exceed_the_limit(db, db_url, tmp_path):
    procs.create_tables(db)
    try:
        queue = make_queue(db, procs.flow_registry())
        ids = [r.job_id for r in queue.enqueue_many(
            [(Export(i), to("t", key=f"key-{i % 2}")) for i in range(JOBS)])]
        stop_file = str(tmp_path / "stop")
        workers = [procs.spawn(procs.work, db_url, 4, stop_file) for _ in range(4)]
        try:
            wait_for(lambda: queue.counts(QUEUE).completed == JOBS, timeout=120,
                     interval=0.2, message="every job to complete")
        finally:
            open(stop_file, "w").close()
            for worker in workers:
                worker.join(timeout=60)
        assert [worker.exitcode for worker in workers] == [0] * 4
        seen = db.execute_sql(f"SELECT run_key, running, pid, job_id FROM {procs.SEEN}"
                              ).fetchall()
        runs = Counter(row[3] for row in seen)
        assert sorted(runs.values()) == [1] * JOBS, [job for job, n in runs.items() if n > 1]
        assert max(row[1] for row in seen) <= procs.LIMIT
        assert max(row[1] for row in seen) == procs.LIMIT  # the limit was reached
        assert all(queue.status(job, queue=QUEUE, tenant_id="t").attempts == 1
                   for job in ids)
    finally:
        for table in (procs.RUNNING, procs.SEEN):
            db.execute_sql(f"DROP TABLE {table}")


def test_a_killed_workers_slot_frees_at_its_lease_expiry(db, db_url, tmp_path):
    queue = make_queue(db, procs.flow_registry(), lease_duration=procs.HOLD_LEASE)
    ids = [queue.enqueue(Export(i), to("t", key="one")).job_id for i in range(3)]

    def states() -> list:
        return [(s.state, s.attempts) for s in
                (queue.status(job, queue=QUEUE, tenant_id="t") for job in ids)]

    held = [(JobState.LEASED, 1), (JobState.LEASED, 1), (JobState.PENDING, 0)]
    started = [str(tmp_path / f"started{n}") for n in range(2)]
    go = str(tmp_path / "go")
    holders = [procs.spawn(procs.hold_one, db_url, started[n], go) for n in range(2)]
    try:
        wait_for(lambda: all(os.path.exists(path) for path in started), timeout=60,
                 message="both holders to start")
        open(go, "w").close()
        # What the database holds, not what a holder says: a holder's claim that lost
        # its job to the other holder's got nothing, and that holder claims again.
        wait_for(lambda: states() == held, timeout=30, message="both holders to claim")
    finally:
        for holder in holders:
            holder.kill()  # SIGKILL: no lease is released, no slot handed back
            holder.join()
    assert queue.claim(QUEUE) is None  # both slots held by the dead leases
    assert states() == held
    first = wait_for(lambda: queue.claim(QUEUE), timeout=30, interval=0.1,
                     message="a slot to free at the lease expiry")
    second = wait_for(lambda: queue.claim(QUEUE), timeout=30, interval=0.1,
                      message="the other slot to free at its lease expiry")
    # Taken over, an attempt spent; in the order their leases expire (the holders
    # claimed at once, so either may be first).
    assert {first.job_id, second.job_id} == set(ids[:2])
    assert (first.attempt, second.attempt) == (2, 2)
    assert queue.claim(QUEUE) is None  # the third still waits: two slots, both taken
    assert [state for state, _ in states()] == [JobState.LEASED, JobState.LEASED,
                                                JobState.PENDING]
