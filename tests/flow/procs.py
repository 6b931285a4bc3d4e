"""Worker processes of the flow-control tests (spawn context: each child imports this
module afresh and opens its own database from the URL)."""
from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from typing import Any

from caravel_lite import JobContext, JobRegistry, QueueWorker, open_database
from tests.flow.jobs import QUEUE, Export, make_queue

LIMIT = 2
# Long enough that no lease runs out on a loaded machine: a takeover would run a job
# twice, which is not what this test is about (the killed-holder test is).
LEASE = timedelta(seconds=15)
HOLD = 0.05  # seconds a handler stays inside, so that overlapping handlers see each other
RUNNING = "flow_test_running"  # the handlers' own table: who runs now, per key
SEEN = "flow_test_seen"  # what each handler saw: how many of its key ran with it

_state: dict = {}


def create_tables(db) -> None:
    db.execute_sql(f"CREATE TABLE {RUNNING} (job_id VARCHAR(36) PRIMARY KEY, "
                   f"run_key VARCHAR(32) NOT NULL)")
    db.execute_sql(f"CREATE TABLE {SEEN} (job_id VARCHAR(36) NOT NULL, "
                   f"run_key VARCHAR(32) NOT NULL, running INTEGER NOT NULL, pid INTEGER)")


def _export(job: Export, ctx: JobContext) -> None:
    """Counts, against the shared table, how many jobs of its key run beside it."""
    db = _state["db"]
    key = f"key-{job.n % 2}"
    with db.connection_context():
        db.execute_sql(f"INSERT INTO {RUNNING} (job_id, run_key) VALUES ({db.param}, "
                       f"{db.param})", (str(ctx.job_id), key))
        (running,) = db.execute_sql(f"SELECT COUNT(*) FROM {RUNNING} WHERE run_key = "
                                    f"{db.param}", (key,)).fetchone()
        db.execute_sql(f"INSERT INTO {SEEN} (job_id, run_key, running, pid) VALUES "
                       f"({db.param}, {db.param}, {db.param}, {db.param})",
                       (str(ctx.job_id), key, int(running), os.getpid()))
        time.sleep(HOLD)
        db.execute_sql(f"DELETE FROM {RUNNING} WHERE job_id = {db.param}", (str(ctx.job_id),))


def flow_registry() -> JobRegistry:
    reg = JobRegistry()
    reg.register("flow.export.v1", Export, _export, concurrency_limit=LIMIT)
    return reg


def work(url: str, concurrency: int, stop_file: str) -> None:
    """Run a worker of ``concurrency`` threads until ``stop_file`` exists."""
    db = open_database(url)
    _state["db"] = open_database(url)
    stop = threading.Event()

    def watch() -> None:
        while not os.path.exists(stop_file):
            time.sleep(0.05)
        stop.set()

    threading.Thread(target=watch, daemon=True).start()
    queue = make_queue(db, flow_registry(), lease_duration=LEASE)
    QueueWorker(queue, concurrency=concurrency, poll_interval=0.2).run(QUEUE, stop)


# The killed holders' lease: long enough that both are killed before it runs out on a
# loaded machine. It starts at their claims, which wait until both processes are up
# (spawning a process can take a second or two there).
HOLD_LEASE = timedelta(seconds=5)


def hold_one(url: str, started_file: str, go_file: str) -> None:
    """Once ``go_file`` exists, claim one job of the key and hold it without renewing
    (killed by the test). Claims again while a claim comes back empty: two holders
    that choose the same job both take a slot for it, and the one that loses the job
    hands its slot back and gets nothing."""
    db = open_database(url)
    queue = make_queue(db, flow_registry(), lease_duration=HOLD_LEASE)
    open(started_file, "w").close()
    while not os.path.exists(go_file):
        time.sleep(0.01)
    while queue.claim(QUEUE) is None:
        time.sleep(0.01)
    time.sleep(600)


def spawn(target: Any, *args: Any) -> Any:
    import multiprocessing
    process = multiprocessing.get_context("spawn").Process(target=target, args=args)
    process.start()
    return process
