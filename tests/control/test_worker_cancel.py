"""A running job cancelled by an operator (issue 25): its worker sees the request
within max(1 s, renewal interval) (one read per worker a second, not one per job),
sets ``ctx.cancelled`` and, whatever the handler then does, the job ends CANCELLED,
never retried; a job whose worker was killed ends CANCELLED when its lease expires.
Real threads and processes, short leases."""
from __future__ import annotations

import os
import signal
import time

import pytest

from caravel_lite import JobState, QueueAdmin
from caravel_lite.worker import renewals
from tests.cli import procs
from tests.control.app import QUEUE, READY_ENV, AsyncHold, Hold, Quick, Stubborn
from tests.control.helpers import Running, enqueue, queue_on, state_of, wait_ready, wait_state
from tests.support import wait_for


@pytest.fixture
def ready(tmp_path, monkeypatch):
    monkeypatch.setenv(READY_ENV, str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("job", [Hold(20), Hold(20, raise_after=True), AsyncHold(20)],
                         ids=["sync-returns", "sync-raises", "async"])
def test_a_running_job_is_told_to_stop_and_ends_cancelled(db_url, ready, job):
    run = Running(db_url, max_attempts=3)
    try:
        job_id = enqueue(run.queue, job)
        wait_ready(ready, job_id)
        asked = time.monotonic()
        assert QueueAdmin(run.queue.db).cancel(job_id)
        wait_state(run.queue, job_id, JobState.CANCELLED, timeout=5)
        # seen within the poll interval (1 s), plus the handler's own end
        assert time.monotonic() - asked < 2.5
        # the worker goes on with other work
        other = enqueue(run.queue, Quick(1))
        wait_state(run.queue, other, JobState.COMPLETED)
    finally:
        run.stop()
    assert QueueAdmin(run.queue.db).job(job_id).attempts == 1  # never retried


def test_a_handler_that_ignores_cancellation_still_ends_cancelled(db_url, ready):
    run = Running(db_url)
    try:
        job_id = enqueue(run.queue, Stubborn(2.0))
        wait_ready(ready, job_id)
        assert QueueAdmin(run.queue.db).cancel(job_id)
        time.sleep(0.1)
        assert state_of(run.queue, job_id) is JobState.LEASED  # still running
        wait_state(run.queue, job_id, JobState.CANCELLED, timeout=6)
    finally:
        run.stop()


def test_the_requests_of_all_running_jobs_are_one_read_a_second(db_url, ready, monkeypatch):
    reads = []
    real = renewals.Renewer._poll_cancels

    def counting(self, controls):
        before = self._next_poll
        real(self, controls)
        if self._next_poll != before:
            reads.append(len(controls))
    monkeypatch.setattr(renewals.Renewer, "_poll_cancels", counting)
    run = Running(db_url)
    run.worker.concurrency = 1
    try:
        job_id = enqueue(run.queue, Hold(1.6))
        wait_ready(ready, job_id)
        wait_state(run.queue, job_id, JobState.COMPLETED, timeout=6)
    finally:
        run.stop()
    assert 1 <= len(reads) <= 3  # about one a second, not one per tick (10 a second)


def test_a_killed_workers_job_is_cancelled_at_its_lease_expiry_never_rerun(db_url, ready):
    worker = procs.start("worker", "tests.control.app:registry", "--queue", QUEUE,
                         "--database", db_url, "--lease-seconds", "2",
                         env={READY_ENV: str(ready)})
    queue = queue_on(db_url)
    try:
        job_id = enqueue(queue, Stubborn(30))
        wait_ready(ready, job_id, timeout=30)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        assert QueueAdmin(queue.db).cancel(job_id)
        assert state_of(queue, job_id) is JobState.LEASED
        # Once the lease runs out, the sweep before a claim cancels it, never re-runs it.
        wait_for(lambda: queue.claim(QUEUE) is None
                 and state_of(queue, job_id) is JobState.CANCELLED, 10,
                 message="the expired lease cancelled")
        assert QueueAdmin(queue.db).job(job_id).attempts == 1
    finally:
        if worker.poll() is None:
            worker.kill()
        procs.finish(worker)
        queue.db.close()


def test_a_job_shorter_than_the_poll_interval_costs_no_read_of_cancel_requests(
        backend, db_url, monkeypatch):
    """The renewer's first read of cancel requests comes one interval after jobs began
    to run: run_once of a quick job sends none (and opens no connection in the
    renewer's thread, whose late close raced a script's clean-up of its SQLite files)."""
    queue = queue_on(db_url)
    reads = []
    requested = queue.cancels.requested
    monkeypatch.setattr(queue.cancels, "requested",
                        lambda db, watched: reads.append(list(watched)) or requested(db, watched))
    job_id = enqueue(queue, Stubborn(0.5))  # half a second: several renewer ticks
    from caravel_lite import QueueWorker
    assert QueueWorker(queue).run_once(QUEUE)
    assert state_of(queue, job_id) is JobState.COMPLETED
    assert reads == []
