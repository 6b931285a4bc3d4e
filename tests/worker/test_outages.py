"""run(max_outage=...) rides out database outages (every database unless noted): a
killed connection on an idle and on a busy worker, acknowledgements written after the
outage (never twice), the budget, and faults waiting cannot fix."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, List

import peewee
import pytest

from caravel_lite import (DatabaseQueue, JobContext, JobRegistry, JobState, QueueWorker,
                          open_database)
from caravel_lite.errors import InvalidField

from tests.support import kill_other_connections, wait_for
from tests.worker.helpers import QUEUE, enqueue, options, status
from tests.worker.metrics import Metrics


@dataclass(frozen=True)
class Step:
    n: int


class Run:
    """worker.run(QUEUE, stop, max_outage=...) in a thread; keeps its exception."""

    def __init__(self, worker: QueueWorker, max_outage: float) -> None:
        self.worker = worker
        self.stop = threading.Event()
        self.errors: List[BaseException] = []
        self.thread = threading.Thread(target=self._main, args=(max_outage,), daemon=True)
        self.thread.start()

    def _main(self, max_outage: float) -> None:
        try:
            self.worker.run(QUEUE, self.stop, max_outage=max_outage)
        except BaseException as exc:
            self.errors.append(exc)
        finally:
            self.worker.queue.db.close()

    def join(self, timeout: float = 20) -> None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"


@pytest.mark.backends("postgres", "mysql")
def test_an_idle_worker_survives_a_killed_connection(db, connect, backend):
    ran: List[int] = []
    registry = JobRegistry()
    registry.register("tests.step.v1", Step, lambda job, ctx: ran.append(job.n))
    queue = DatabaseQueue(db, registry, options(lease=30))
    enqueue(queue, Step(0))
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         poll_interval=0.2)
    run = Run(worker, max_outage=30)
    try:
        wait_for(lambda: ran == [0], message="the first job")
        time.sleep(0.3)  # idle now
        assert kill_other_connections(db, backend) >= 1
        for n in (1, 2):
            job_id = enqueue(queue, Step(n))
            wait_for(lambda: status(queue, job_id).state is JobState.COMPLETED,
                     timeout=20, message=f"job {n} after the kill")
        assert run.thread.is_alive() and not run.errors
    finally:
        run.join()
    assert not run.errors
    assert ran == [0, 1, 2]


@pytest.mark.backends("postgres", "mysql")
def test_a_busy_worker_survives_a_killed_connection_and_acknowledges_after(db, connect,
                                                                           backend):
    metrics = Metrics()
    registry = JobRegistry()
    go = threading.Event()
    running: List[int] = []

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        running.append(job.n)
        go.wait(10)  # the kill lands while these run

    queue = DatabaseQueue(db, registry, options(lease=30))
    ids = [enqueue(queue, Step(n)) for n in range(6)]
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30),
                                       telemetry=metrics.telemetry), concurrency=3)
    run = Run(worker, max_outage=30)
    try:
        wait_for(lambda: len(running) == 3, message="three jobs running")
        assert kill_other_connections(db, backend) >= 1
        go.set()
        wait_for(lambda: queue.counts(QUEUE).completed == 6, timeout=30,
                 message="every job completed after the kill")
    finally:
        go.set()
        run.join()
    assert not run.errors
    for job_id in ids:
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.COMPLETED, 1)
    totals = metrics.totals()
    assert totals[("completed", None)] == 6 and totals[("lease_lost", None)] == 0


class FlakyAcks(DatabaseQueue):
    """complete_many fails like a lost database the first ``failures`` times."""

    failures = 2

    def complete_many(self, leases: Any) -> List[bool]:
        if self.failures > 0:
            self.failures -= 1
            raise peewee.OperationalError("simulated outage")
        return super().complete_many(leases)


def test_an_acknowledgement_that_failed_is_written_after_the_outage_once(db, connect):
    metrics = Metrics()
    registry = JobRegistry()
    registry.register("tests.step.v1", Step, lambda job, ctx: None)
    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(1))
    flaky = FlakyAcks(connect(), registry, options(lease=30), telemetry=metrics.telemetry)
    run = Run(QueueWorker(flaky), max_outage=30)
    try:
        wait_for(lambda: status(queue, job_id).state is JobState.COMPLETED, timeout=20,
                 message="the completion, after two failed writes")
    finally:
        run.join()
    assert not run.errors and flaky.failures == 0
    found = status(queue, job_id)
    assert (found.state, found.attempts) == (JobState.COMPLETED, 1)
    assert metrics.totals()[("completed", None)] == 1


class Down(DatabaseQueue):
    """A database that stays away: every claim fails like a lost connection."""

    def claim(self, queue_name: str) -> Any:
        raise peewee.OperationalError("simulated outage")

    def claim_batch(self, queue_name: str, limit: int, **options: Any) -> Any:
        raise peewee.OperationalError("simulated outage")


def test_the_outage_budget_ends_the_run_with_one_warning(db, caplog):
    caplog.set_level(logging.DEBUG, logger="caravel_lite")
    worker = QueueWorker(Down(db, JobRegistry(), options()))
    started = time.monotonic()
    with pytest.raises(peewee.OperationalError):
        worker.run(QUEUE, threading.Event(), max_outage=1.2)
    elapsed = time.monotonic() - started
    assert 1.2 <= elapsed < 15
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and "database unavailable" in r.getMessage()]
    assert len(warnings) == 1
    assert any(r.levelno == logging.ERROR and "giving up" in r.getMessage()
               for r in caplog.records)


def test_a_stop_during_the_back_off_ends_the_run_normally(db):
    worker = QueueWorker(Down(db, JobRegistry(), options()))
    stop = threading.Event()
    threading.Timer(0.3, stop.set).start()
    started = time.monotonic()
    worker.run(QUEUE, stop, max_outage=60)  # returns: no error
    assert time.monotonic() - started < 10


def test_an_unmigrated_database_ends_the_run_at_once(new_database):
    db = open_database(new_database())
    registry = JobRegistry()
    worker = QueueWorker(DatabaseQueue(db, registry, options()))
    started = time.monotonic()
    with pytest.raises(peewee.DatabaseError):
        worker.run(QUEUE, threading.Event(), max_outage=60)
    assert time.monotonic() - started < 10  # not after the 60 s budget
    db.close()


def test_without_max_outage_errors_propagate_at_once(db):
    worker = QueueWorker(Down(db, JobRegistry(), options()))
    with pytest.raises(peewee.OperationalError):
        worker.run(QUEUE, threading.Event())


@pytest.mark.parametrize("value", [0, -1, "5", True, float("inf")])
def test_max_outage_is_validated(db, value):
    worker = QueueWorker(DatabaseQueue(db, JobRegistry(), options()))
    with pytest.raises(InvalidField, match="max_outage"):
        worker.run(QUEUE, threading.Event(), max_outage=value)


class AnswerLost(DatabaseQueue):
    """A queue whose first claim commits and then fails as if its answer, and the read
    back of what it leased, had been lost with the database."""

    lost = 0

    def claim_batch(self, queue_name: str, limit: int, *, token: Any = None) -> Any:
        batch = super().claim_batch(queue_name, limit, token=token)
        if batch.leases and not self.lost:
            self.lost += 1
            raise peewee.OperationalError("server closed the connection unexpectedly")
        return batch


def test_a_claim_whose_answer_was_lost_is_handed_back_before_the_next_claim(db, connect):
    """Its rows are leased under the worker's token: the next pass hands them back
    (attempt given back) instead of leaving them to a 30 s lease."""
    ran: List[int] = []
    registry = JobRegistry()
    registry.register("tests.step.v1", Step, lambda job, ctx: ran.append(job.n))
    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(7))
    worker = QueueWorker(AnswerLost(connect(), registry, options(lease=30)),
                         poll_interval=0.2)
    run = Run(worker, max_outage=30)
    try:
        wait_for(lambda: status(queue, job_id).state is JobState.COMPLETED, timeout=10,
                 message="the job, claimed again after the lost answer")
    finally:
        run.join()
    assert not run.errors
    assert worker.queue.lost == 1 and ran == [7]
    assert status(queue, job_id).attempts == 1  # the lost claim's attempt given back
