"""The worker's runtime flags as a user passes them, each test a subprocess: several
queues, concurrency, the shutdown timeout, riding out an outage (#12.6)."""
from __future__ import annotations

import signal
import time

import pytest

from caravel_lite import DatabaseQueue, Dispatch, JobState
from tests.cli import procs
from tests.cli.app import OTHER_QUEUE, QUEUE, TENANT, Gate, Note, Stubborn, registry
from tests.cli.outage import rides_out_then_gives_up
from tests.support import wait_for

REGISTRY = "tests.cli.app:registry"


def state(queue: DatabaseQueue, job_id, queue_name: str = QUEUE):
    found = queue.status(job_id, queue_name, TENANT)
    return found.state if found is not None else None


def stop(process) -> tuple:
    process.send_signal(signal.SIGTERM)
    return procs.finish(process)


def test_a_repeated_queue_flag_serves_every_queue(db, db_url):
    queue = DatabaseQueue(db, registry)
    first = queue.enqueue(Note("first"), Dispatch(QUEUE, TENANT)).job_id
    second = queue.enqueue(Note("second"), Dispatch(OTHER_QUEUE, TENANT)).job_id
    process = procs.start("worker", REGISTRY, "--queue", QUEUE, "--queue", OTHER_QUEUE,
                          "--database", db_url, "--poll-interval", "0.1")
    try:
        wait_for(lambda: state(queue, first) is JobState.COMPLETED
                 and state(queue, second, OTHER_QUEUE) is JobState.COMPLETED,
                 timeout=30, message="both queues to be served")
    finally:
        code, _, err = stop(process)
    assert code == 0, err
    assert "Traceback" not in err


def test_concurrency_runs_that_many_jobs_at_once(db, db_url, tmp_path):
    queue = DatabaseQueue(db, registry)
    jobs = [queue.enqueue(Gate(3), Dispatch(QUEUE, TENANT)).job_id for _ in range(3)]
    process = procs.start("worker", REGISTRY, "--queue", QUEUE, "--concurrency", "3",
                          "--database", db_url, env={"CARAVEL_TEST_GATE_DIR": str(tmp_path)})
    try:
        wait_for(lambda: all(state(queue, job) is not JobState.PENDING
                             and state(queue, job) is not JobState.LEASED for job in jobs),
                 timeout=40, message="the three gate jobs to finish")
    finally:
        code, _, err = stop(process)
    assert code == 0, err
    for job in jobs:
        found = queue.status(job, QUEUE, TENANT)
        assert (found.state, found.attempts) == (JobState.COMPLETED, 1), err


def test_the_shutdown_timeout_bounds_how_long_a_stop_waits(db, db_url, tmp_path):
    queue = DatabaseQueue(db, registry)
    job = queue.enqueue(Stubborn(120), Dispatch(QUEUE, TENANT)).job_id
    ready = tmp_path / "ready"
    process = procs.start("worker", REGISTRY, "--queue", QUEUE, "--shutdown-timeout", "1",
                          "--database", db_url, env={"CARAVEL_TEST_READY": str(ready)})
    try:
        wait_for(ready.exists, timeout=30, message="the stubborn handler to start")
        started = time.monotonic()
        code, _, err = stop(process)
        waited = time.monotonic() - started
    finally:
        if process.poll() is None:
            process.kill()
    assert code == 0, err
    assert waited < 60, f"the stop took {waited:.1f}s although the handler runs for 120s"
    # The handler did not return: its job stays leased for another worker.
    assert state(queue, job) is JobState.LEASED


@pytest.mark.parametrize("flag, value", [("--concurrency", "0"), ("--shutdown-timeout", "-1"),
                                         ("--max-outage", "-1"), ("--prefetch", "1000")])
def test_out_of_range_runtime_flags_exit_2(flag, value):
    done = procs.run("worker", REGISTRY, "--queue", QUEUE, flag, value,
                     "--database", "sqlite:///never-opened.db")
    assert done.returncode == 2, done.stderr
    assert procs.one_line(done.stderr).startswith("caravel-lite worker: ")


@pytest.mark.backends("postgres", "mysql")
def test_the_worker_rides_out_an_outage_then_gives_up_after_max_outage(db, db_url):
    queue = DatabaseQueue(db, registry)

    def start(url: str):
        return procs.start("worker", REGISTRY, "--queue", QUEUE, "--max-outage", "4",
                           "--poll-interval", "0.2", "--database", url)

    rides_out_then_gives_up(
        "worker", db_url, start,
        lambda key: queue.enqueue(Note(key), Dispatch(QUEUE, TENANT)).job_id,
        lambda job_id: state(queue, job_id) is JobState.COMPLETED)
