"""Migration 0008 (job options and kept results), every database, as a rolling deploy
meets it: jobs and outbox intents written by the code before it are claimed, run and
reported after it with the queue's options (what they had), never the options their
type gained in the new code; the old code's statements still work against the new
schema; the script can be reverted and applied again."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest

from caravel_lite import (DatabaseQueue, Dispatch, Failure, JobContext, JobRegistry, JobState,
                          OutboxRelay, QueueOptions, QueueWorker, migrate, open_database)
from caravel_lite.migrator import runner
from caravel_lite.testing import ManualClock

from tests.migrations.before_0008 import code_before_0008

QUEUE = "rolling"
TENANT = "tenant-a"
OLD_OUTBOX_COLUMNS = ("id", "queue", "tenant_id", "idempotency_key", "dedup_key",
                      "wire_name", "payload", "priority", "available_at", "max_attempts",
                      "staged_at")


@dataclass(frozen=True)
class Report:
    n: int


def _registry(**type_options) -> JobRegistry:
    registry = JobRegistry()

    @registry.job("rolling.report.v1", Report, **type_options)
    def report(job: Report, ctx: JobContext) -> int:
        if job.n < 0:
            raise RuntimeError("fails")
        return job.n

    return registry


@pytest.fixture
def fresh(new_database):
    db = open_database(new_database())
    db.connect()
    yield db
    db.close()


def _status(queue, job_id):
    found = queue.status(job_id, queue=QUEUE, tenant_id=TENANT)
    assert found is not None
    return found


def test_jobs_from_before_0008_run_with_the_options_they_had(fresh):
    assert runner(fresh).up("0007_listings_without_pending")[-1] == \
        "0007_listings_without_pending"
    clock = ManualClock()
    old_options = QueueOptions(max_attempts=3, retry_delay=timedelta(seconds=5))
    dispatch = Dispatch(queue=QUEUE, tenant_id=TENANT)
    with code_before_0008(DatabaseQueue(fresh, _registry(), old_options,
                                        clock=clock)) as old:
        done = old.enqueue(Report(3), dispatch).job_id
        completed = old.claim(QUEUE)
        assert completed.job_id == done and old.complete(completed)
        leased = old.enqueue(Report(2), dispatch).job_id
        held = old.claim(QUEUE)
        assert held.job_id == leased
        pending = old.enqueue(Report(-1), dispatch).job_id
    p = fresh.param
    intent = str(uuid.uuid4())
    fresh.execute_sql(
        f"INSERT INTO caravel_outbox ({', '.join(OLD_OUTBOX_COLUMNS)}) "
        f"VALUES ({', '.join([p] * len(OLD_OUTBOX_COLUMNS))})",
        (intent, QUEUE, TENANT, None, None, "rolling.report.v1", '{"n":4}', 2,
         0, 3, 0))

    # 0008 and every later migration: the new code is the whole of the new release.
    assert migrate(fresh)[0] == "0008_job_options_and_results"

    # The new code: the type now keeps results, retries after 60 s and has 1 attempt.
    new = DatabaseQueue(fresh, _registry(keep_result=True, max_attempts=1,
                                         retry_delay=timedelta(seconds=60),
                                         timeout=timedelta(seconds=30)),
                        old_options, clock=clock)
    worker = QueueWorker(new)
    assert worker.run_once(QUEUE)  # the job that fails: the queue's backoff, 3 attempts
    found = _status(new, pending)
    assert (found.state, found.max_attempts, found.last_failure) == (
        JobState.PENDING, 3, Failure.HANDLER_FAILED)
    assert found.available_at == clock() + timedelta(seconds=5)
    assert new.complete(held)  # a lease the old code took, completed by the new
    assert new.result(leased, QUEUE, TENANT).value is None  # it kept no result
    assert new.result(done, QUEUE, TENANT).state is JobState.COMPLETED
    assert OutboxRelay(fresh, new).run_once() == 1
    relayed = fresh.execute_sql(
        "SELECT job_id FROM caravel_outbox WHERE id = " + p, (intent,)).fetchone()[0]
    assert worker.run_once(QUEUE)
    assert new.result(relayed, QUEUE, TENANT).value is None
    assert _status(new, relayed).state is JobState.COMPLETED

    # The old code's statements against the new schema (the deploy's other half).
    new_job = new.enqueue(Report(5), dispatch).job_id  # stored options: keep, timeout
    with code_before_0008(DatabaseQueue(fresh, _registry(), old_options,
                                        clock=clock)) as old:
        old_job = old.enqueue(Report(6), dispatch).job_id
        for _ in range(2):
            lease = old.claim(QUEUE)
            assert lease is not None and lease.job_id in (new_job, old_job)
            assert old.complete(lease)
    assert new.result(old_job, QUEUE, TENANT).state is JobState.COMPLETED

    assert runner(fresh).down("0008_job_options_and_results")[-1] == \
        "0008_job_options_and_results"
    assert migrate(fresh)[0] == "0008_job_options_and_results"
    assert _status(new, old_job).state is JobState.COMPLETED
