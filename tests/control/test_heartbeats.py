"""Worker heartbeats (issue 25): a running worker has a row (id, host, pid, queues,
concurrency, version, started, last seen, jobs running) and the leases it holds name
it; a clean stop removes the row; a killed worker's row turns lost after 3 beats."""
from __future__ import annotations

import os
import signal
import socket
from datetime import timedelta

import peewee

from caravel_lite import DatabaseQueue, QueueAdmin
from caravel_lite.heartbeats import BEAT, LOST_BEATS, Heartbeats
from caravel_lite.testing import ManualClock
from caravel_lite.worker.control import RunControl
from tests.cli import procs
from tests.control.app import OTHER, QUEUE, READY_ENV, Hold, registry
from tests.control.helpers import Running, enqueue, queue_on, wait_ready
from tests.support import wait_for


def test_a_running_workers_row_names_its_jobs_and_goes_on_a_clean_stop(db_url, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv(READY_ENV, str(tmp_path))
    run = Running(db_url, names=(QUEUE, OTHER))
    admin = QueueAdmin(run.queue.db)
    try:
        (worker,) = wait_for(admin.workers, message="the worker's heartbeat row")
        assert (worker.host, worker.pid, worker.queues, worker.concurrency) == (
            socket.gethostname(), os.getpid(), (QUEUE, OTHER), 1)
        assert not worker.lost and worker.version
        job_id = enqueue(run.queue, Hold(10))
        wait_ready(tmp_path, job_id)
        (worker,) = admin.workers()
        assert [j.job_id for j in worker.jobs] == [job_id]
        assert worker.jobs[0].claimed_at is not None
        assert admin.job(job_id).worker_id == worker.worker_id
        assert admin.cancel(job_id)
    finally:
        run.stop()
    assert admin.workers() == ()


def test_a_killed_workers_row_is_shown_lost_after_three_beats(db_url):
    worker = procs.start("worker", "tests.control.app:registry", "--queue", QUEUE,
                         "--database", db_url)
    queue = queue_on(db_url)
    try:
        admin = QueueAdmin(queue.db)
        (row,) = wait_for(admin.workers, 30, message="the worker's heartbeat row")
        assert row.pid == worker.pid and not row.lost
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(10)
        later = ManualClock(row.last_seen_at + timedelta(seconds=BEAT * LOST_BEATS + 1))
        (lost,) = QueueAdmin(queue.db, clock=later).workers()
        assert lost.worker_id == row.worker_id and lost.lost
        after_a_day = ManualClock(row.last_seen_at + timedelta(days=1, seconds=1))
        assert QueueAdmin(queue.db, clock=after_a_day).workers() == ()  # forgotten
    finally:
        if worker.poll() is None:
            worker.kill()
        procs.finish(worker)
        queue.db.close()


def test_a_heartbeat_row_whose_insert_reply_was_lost_is_refreshed_and_removed(db, monkeypatch):
    register = Heartbeats.register

    def insert_then_lose_the_reply(self, *args):
        register(self, *args)
        monkeypatch.setattr(Heartbeats, "register", register)
        raise peewee.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(Heartbeats, "register", insert_then_lose_the_reply)
    clock = ManualClock()
    run = RunControl(DatabaseQueue(db, registry, clock=clock), [QUEUE], 2)
    run._beat(0)  # the row is written, the reply lost
    clock.advance(timedelta(seconds=BEAT * LOST_BEATS + 1))
    run._beat(1)  # refreshes that row (an insert again would fail on its key, every beat)
    (row,) = QueueAdmin(db, clock=clock).workers()
    assert row.worker_id == run.worker_id and row.running == 1 and not row.lost
    run.close()
    assert QueueAdmin(db, clock=clock).workers() == ()
