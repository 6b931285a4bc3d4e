"""Each failure's log line says what became of the job (every database): ``attempt
1/3, retry at <time>`` while attempts are left, ``attempt 3/3, dead-lettered`` for the
last; a job that could not run says so too."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from caravel_lite import DatabaseQueue, Dispatch, JobContext, JobRegistry, JobState, QueueWorker
from caravel_lite.testing import ManualClock

from tests.worker.helpers import QUEUE, TENANT, enqueue, options, status


@dataclass(frozen=True)
class Step:
    n: int


def _lines(caplog, job_id) -> list:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and str(job_id) in r.getMessage()]


def test_each_failure_line_says_the_attempt_and_what_comes_next(db, caplog):
    clock = ManualClock()
    registry = JobRegistry()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        raise ValueError("no")

    queue = DatabaseQueue(db, registry, options(lease=30, max_attempts=3,
                                                retry_delay=timedelta(seconds=10)),
                          clock=clock)
    job_id = enqueue(queue, Step(1))
    worker = QueueWorker(queue)
    caplog.set_level(logging.WARNING, logger="caravel_lite")
    start = clock()
    for _ in range(3):
        assert worker.run_once(QUEUE)
        clock.advance(timedelta(hours=1))
    worker.close()
    assert status(queue, job_id).state is JobState.DEAD_LETTER
    lines = _lines(caplog, job_id)
    assert len(lines) == 3, lines
    assert all("handler raised ValueError at" in line for line in lines), lines
    # The backoff doubles: 10 s after the first failure, 20 s after the second.
    first = start + timedelta(seconds=10)
    second = start + timedelta(hours=1, seconds=20)
    assert lines[0].endswith(f"attempt 1/3, retry at {first.isoformat(timespec='milliseconds')}")
    assert lines[1].endswith(f"attempt 2/3, retry at {second.isoformat(timespec='milliseconds')}")
    assert lines[2].endswith("attempt 3/3, dead-lettered"), lines

def test_a_job_that_cannot_run_says_it_was_dead_lettered(db, caplog):
    other = JobRegistry()
    other.register("tests.unknown.v1", Step, lambda job, ctx: None)
    stranger = DatabaseQueue(db, other, options(max_attempts=1)).enqueue(
        Step(9), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
    worker = QueueWorker(DatabaseQueue(db, JobRegistry(), options()))
    caplog.set_level(logging.WARNING, logger="caravel_lite")
    assert worker.run_once(QUEUE)
    worker.close()
    assert any(line.endswith("failed without running (unknown_job_type); "
                             "attempt 1/1, dead-lettered")
               for line in _lines(caplog, stranger)), _lines(caplog, stranger)
