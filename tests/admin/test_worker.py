"""The worker's part of the operators' issue, on every database: a handler's failure is
kept in the history with its type and site (the log line too, never the message);
``QueueWorker(prune=...)`` prunes its own queues' old finished jobs while idle, in small
batches (one queue's at a time, each followed by the pause the dialect's pacing asks
for, read from fake timers), never a pending or leased job; ``--prune-after`` on the
command line."""
from __future__ import annotations

import logging
import threading
from datetime import timedelta

import pytest

from caravel_lite import (Dispatch, Failure, InvalidField, JobRegistry, JobState,
                          QueueAdmin, QueueWorker)
from caravel_lite.admin import retention
from caravel_lite.testing import ManualClock
from caravel_lite.worker import retention as worker_retention
from tests.admin.seed import START, Mail, make_queue
from tests.cli import procs
from tests.support import wait_for

SECRET = "token=abc123"


class PaymentDeclined(Exception):
    pass


def charge(job: Mail, ctx) -> None:
    if job.n < 0:
        raise PaymentDeclined(SECRET)


registry = JobRegistry()
registry.register("test.mail.v1", Mail, charge)


def _queue(db, clock, **options):
    queue = make_queue(db, clock, **options)
    queue.registry = registry  # the handler above, same wire name as the seed's
    return queue


def test_a_handler_failure_is_kept_with_type_and_site_and_logged_without_message(
        db, caplog):
    clock = ManualClock(START)
    queue = _queue(db, clock, max_attempts=2)
    job_id = queue.enqueue(Mail(-1), Dispatch(queue="pay", tenant_id="t")).job_id
    worker = QueueWorker(queue)
    with caplog.at_level(logging.WARNING, logger="caravel_lite"):
        assert worker.run_once("pay")
    worker.close()
    (record,) = QueueAdmin(db, clock=clock).job(job_id).failures
    assert record.error_type == f"{__name__}.PaymentDeclined"
    assert record.site.startswith(f"{__name__}:charge:")
    assert record.category is Failure.HANDLER_FAILED and record.attempt == 1
    logged = [r.getMessage() for r in caplog.records if "PaymentDeclined" in r.getMessage()]
    assert logged and record.site in logged[0]
    assert all(SECRET not in r.getMessage() for r in caplog.records)


def test_prune_while_idle_takes_only_old_finished_jobs_of_its_queues(db, monkeypatch):
    monkeypatch.setattr(worker_retention, "BATCH", 3)
    clock = ManualClock(START)
    queue = _queue(db, clock, max_attempts=1)
    old = {}
    for name in ("pay", "other"):
        for n in range(5):
            queue.enqueue(Mail(-1 if n == 0 else n), Dispatch(queue=name, tenant_id="t"))
            lease = queue.claim(name)
            assert (queue.fail(lease, Failure.HANDLER_FAILED) if n == 0
                    else queue.complete(lease))
        old[name] = 5
    clock.advance(timedelta(days=8))
    waiting = queue.enqueue(Mail(1), Dispatch(queue="pay", tenant_id="t",
                                              not_before=clock() + timedelta(days=1))).job_id
    recent = queue.enqueue(Mail(2), Dispatch(queue="pay", tenant_id="t")).job_id
    admin = QueueAdmin(db, clock=clock)
    worker = QueueWorker(queue, prune=timedelta(days=7), poll_interval=0.1)
    stop = threading.Event()
    errors = []

    def run():
        try:
            worker.run("pay", stop=stop)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        wait_for(lambda: errors or (admin.job(recent).state is JobState.COMPLETED
                                    and len(admin.jobs(queue="pay", limit=100)) == 2),
                 timeout=60, message="the recent job run and the old ones pruned")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors
    assert {j.job_id for j in admin.jobs(queue="pay", limit=100)} == {waiting, recent}
    assert admin.job(waiting).state is JobState.PENDING
    assert len(admin.jobs(queue="other", limit=100)) == 5  # not this worker's queue
    assert db.execute_sql("SELECT COUNT(*) FROM caravel_failures WHERE queue = "
                          + db.param, ("pay",)).fetchone()[0] == 0


class Timer:
    """A monotonic timer that stands still unless moved (``tick``: seconds it moves at
    every reading)."""

    def __init__(self, tick=0.0):
        self.now = 100.0
        self.tick = tick

    def __call__(self):
        self.now += self.tick
        return self.now


def test_each_idle_step_prunes_one_batch_of_one_queue_then_waits_the_pause(db,
                                                                        monkeypatch):
    monkeypatch.setattr(worker_retention, "BATCH", 3)
    clock = ManualClock(START)
    queue = _queue(db, clock)
    for name in ("a", "b"):
        for n in range(5):
            queue.enqueue(Mail(n), Dispatch(queue=name, tenant_id="t"))
            assert queue.complete(queue.claim(name))
    clock.advance(timedelta(days=8))
    # Every batch's transaction seems to take 50 ms; nothing may sleep in the pruner.
    pruner = retention.Pruner(db, sleep=lambda s: pytest.fail("slept"), timer=Timer(0.05))
    timer = Timer()
    pruning = worker_retention.IdlePruning(queue, timedelta(days=7), timer=timer,
                                           pruner=pruner)
    pause = pruner.pacing.pause(0.05)
    admin = QueueAdmin(db, clock=clock)

    def left():
        return tuple(len(admin.jobs(queue=name, limit=100)) for name in ("a", "b"))

    for expected in ((2, 5), (2, 2), (0, 2), (0, 0)):  # the queues in turn
        assert pruning.step(["a", "b"]) is True
        assert left() == expected
        assert pruning.wait_limit(10.0) == pytest.approx(pause)
        assert pruning.wait_limit(pause / 2) == pause / 2
        assert pruning.step(["a", "b"]) is False  # not due yet: nothing deleted
        timer.now += pause
        assert pruning.wait_limit(10.0) == 0.0
    assert pruning.step(["a", "b"]) is False  # nothing left: the next look much later
    assert pruning.wait_limit(10.0) == 10.0
    assert pruning.wait_limit(3600.0) == pytest.approx(worker_retention.PAUSE)


def test_no_pruning_unless_asked(db):
    clock = ManualClock(START)
    queue = _queue(db, clock)
    queue.enqueue(Mail(1), Dispatch(queue="pay", tenant_id="t"))
    assert QueueWorker(queue).run_once("pay")
    clock.advance(timedelta(days=365))
    worker = QueueWorker(queue, poll_interval=0.1)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=("pay",), kwargs={"stop": stop})
    thread.start()
    stop.wait(0.5)  # idle for a few polls: there is nothing else to wait for
    stop.set()
    thread.join(timeout=30)
    assert len(QueueAdmin(db, clock=clock).jobs()) == 1


@pytest.mark.parametrize("value", [timedelta(seconds=30), 7, "7d"])
def test_prune_must_be_a_long_enough_timedelta(db, value):
    with pytest.raises(InvalidField) as info:
        QueueWorker(_queue(db, ManualClock(START)), prune=value)
    assert info.value.field == "prune"


@pytest.mark.backends("sqlite")
def test_prune_after_on_the_command_line(db_url):
    bad = procs.run("worker", "tests.admin.test_worker:registry", "--queue", "pay",
                    "--database", db_url, "--prune-after", "soon")
    assert bad.returncode == 2 and "--prune-after" in bad.stderr
    short = procs.run("worker", "tests.admin.test_worker:registry", "--queue", "pay",
                      "--database", db_url, "--prune-after", "10s")
    assert short.returncode == 2 and "prune" in short.stderr
