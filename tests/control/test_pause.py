"""Pause and resume (issue 25): workers stop claiming from a paused queue within 2 s
and claim again within 2 s of the resume; running jobs finish; enqueue still works; a
worker on two queues keeps claiming from the other. The paused set is one small read
per worker a second, never one per job."""
from __future__ import annotations

import time
from datetime import timedelta

from caravel_lite import JobState, QueueAdmin, QueueWorker
from caravel_lite.pausing import Pauses
from tests.control.app import OTHER, QUEUE, READY_ENV, Hold, Quick
from tests.control.helpers import Running, enqueue, queue_on, state_of, wait_ready, wait_state
from tests.support import wait_for


def test_pause_and_resume_are_idempotent_and_listed(db):
    admin = QueueAdmin(db)
    assert admin.paused() == set()
    assert admin.pause(QUEUE) and not admin.pause(QUEUE)
    assert admin.pause(OTHER)
    assert admin.paused() == {QUEUE, OTHER}
    assert admin.resume(QUEUE) and not admin.resume(QUEUE)
    assert admin.paused() == {OTHER}


def test_a_worker_on_two_queues_serves_the_other_while_one_is_paused(db_url, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv(READY_ENV, str(tmp_path))
    run = Running(db_url, names=(QUEUE, OTHER), lease_duration=timedelta(seconds=10))
    admin = QueueAdmin(run.queue.db)
    try:
        running = enqueue(run.queue, Hold(2.5))
        wait_ready(tmp_path, running)
        paused_at = time.monotonic()
        assert admin.pause(QUEUE)
        time.sleep(1.6)  # READ_INTERVAL plus a claim round: no claim may start after
        held = [enqueue(run.queue, Quick(n)) for n in range(3)]  # enqueue still works
        served = enqueue(run.queue, Quick(9), OTHER)
        wait_state(run.queue, served, JobState.COMPLETED, queue_name=OTHER)
        wait_state(run.queue, running, JobState.COMPLETED)  # the running job finished
        assert time.monotonic() - paused_at < 5
        assert {state_of(run.queue, j) for j in held} == {JobState.PENDING}
        resumed_at = time.monotonic()
        assert admin.resume(QUEUE)
        for job_id in held:
            wait_state(run.queue, job_id, JobState.COMPLETED, timeout=5)
        assert time.monotonic() - resumed_at < 2.5
    finally:
        run.stop()


def test_jobs_claimed_ahead_from_a_paused_queue_are_handed_back_unstarted(db_url, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv(READY_ENV, str(tmp_path))
    queue = queue_on(db_url)
    running = enqueue(queue, Hold(2.5))
    ahead = [enqueue(queue, Quick(n)) for n in range(3)]  # one claim leases all four
    run = Running(db_url, prefetch=4, lease_duration=timedelta(seconds=10))
    try:
        wait_ready(tmp_path, running)
        assert QueueAdmin(queue.db).pause(QUEUE)
        for job_id in ahead:  # they started after the pause before (the lease was theirs)
            wait_state(queue, job_id, JobState.PENDING, timeout=5)
        wait_state(queue, running, JobState.COMPLETED)
        assert {state_of(queue, j) for j in ahead} == {JobState.PENDING}
        assert {QueueAdmin(queue.db).job(j).attempts for j in ahead} == {0}  # given back
    finally:
        run.stop()
        queue.db.close()


def test_a_worker_whose_only_queue_is_paused_waits_without_spinning(db_url, monkeypatch):
    reads = []
    real = Pauses.paused

    def counting(self):
        reads.append(1)
        return real(self)
    monkeypatch.setattr(Pauses, "paused", counting)
    queue = queue_on(db_url)
    QueueAdmin(queue.db).pause(QUEUE)
    job_id = enqueue(queue, Quick(1))
    run = Running(db_url)
    try:
        wait_for(lambda: len(reads) >= 3, 10, message="three reads of the paused set")
        started = time.monotonic()
        count = len(reads)
        time.sleep(1.5)
        assert len(reads) - count <= 3  # about one a second
        assert state_of(queue, job_id) is JobState.PENDING
        assert QueueAdmin(queue.db).resume(QUEUE)
        wait_state(queue, job_id, JobState.COMPLETED, timeout=5)
        assert time.monotonic() - started < 1.5 + 2.5
    finally:
        run.stop()
        queue.db.close()


def test_run_once_claims_nothing_from_a_paused_queue(db):
    from tests.control.helpers import DatabaseQueue, QueueOptions, registry

    queue = DatabaseQueue(db, registry, QueueOptions())
    worker = QueueWorker(queue)
    job_id = enqueue(queue, Quick(1))
    QueueAdmin(db).pause(QUEUE)
    assert worker.run_once(QUEUE) is False
    QueueAdmin(db).resume(QUEUE)
    worker._paused._read_at = None  # the next look reads again (else within a second)
    assert worker.run_once(QUEUE) is True
    assert state_of(queue, job_id) is JobState.COMPLETED
    worker.close()
