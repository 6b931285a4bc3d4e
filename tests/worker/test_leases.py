"""Lease renewal beside the handler, with real time and short leases."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Dict, List

import peewee
import pytest

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, JobState, QueueWorker

from tests.support import wait_for
from tests.worker.helpers import QUEUE, enqueue, options, raising, status


@dataclass(frozen=True)
class Work:
    label: str


def _now() -> datetime:
    return datetime.now(timezone.utc)


def test_renewal_keeps_a_handler_running_past_the_first_expiry(db, connect):
    registry = JobRegistry()
    opts = options(lease=2, renew=0.25)
    rival = DatabaseQueue(connect(), registry, opts)
    seen: Dict[str, object] = {}

    @registry.job("tests.work.v1", Work)
    def handle(job: Work, ctx: JobContext) -> None:
        started = _now()
        # Run well past the 2 s the claim granted; the renewals must hold the job.
        wait_for(lambda: _now() > started + timedelta(seconds=2.5), timeout=10,
                 message="the original lease to pass")
        seen["rival"] = rival.claim(QUEUE)
        seen["cancelled"] = ctx.cancelled.is_set()

    queue = DatabaseQueue(db, registry, opts)
    job_id = enqueue(queue, Work("long"))
    assert QueueWorker(queue).run_once(QUEUE) is True
    assert seen == {"rival": None, "cancelled": False}
    found = status(queue, job_id)
    assert (found.state, found.attempts) == (JobState.COMPLETED, 1)


def test_reaching_max_lease_lifetime_cancels_and_the_job_is_reclaimable(db, connect):
    registry = JobRegistry()
    opts = options(lease=1, renew=0.25, max_lease_lifetime=timedelta(seconds=1.5))
    cancelled: List[bool] = []

    @registry.job("tests.work.v1", Work)
    def handle(job: Work, ctx: JobContext) -> None:
        cancelled.append(ctx.cancelled.wait(10))

    queue = DatabaseQueue(db, registry, opts)
    job_id = enqueue(queue, Work("endless"))
    assert QueueWorker(queue).run_once(QUEUE) is True
    assert cancelled == [True]
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)

    rival = DatabaseQueue(connect(), registry, opts)
    lease = wait_for(lambda: rival.claim(QUEUE), timeout=10, message="a reclaim")
    assert (lease.job_id, lease.attempt) == (job_id, 2)


def test_a_superseded_token_cancels_the_handler_and_nothing_is_acknowledged(db, connect):
    registry = JobRegistry()
    intruder = connect()
    cancelled: List[bool] = []

    @registry.job("tests.work.v1", Work)
    def handle(job: Work, ctx: JobContext) -> None:
        intruder.execute_sql(
            f"UPDATE caravel_jobs SET lease_token = {intruder.param} WHERE id = {intruder.param}",
            ("stolen", str(ctx.job_id)))
        cancelled.append(ctx.cancelled.wait(10))

    queue = DatabaseQueue(db, registry, options(lease=2, renew=0.25))
    job_id = enqueue(queue, Work("stolen"))
    assert QueueWorker(queue).run_once(QUEUE) is True
    assert cancelled == [True]
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)
    token = db.execute_sql(f"SELECT lease_token FROM caravel_jobs WHERE id = {db.param}",
                           (str(job_id),)).fetchone()[0]
    assert token == "stolen"


def test_a_database_error_while_renewing_cancels_and_propagates(db):
    registry = JobRegistry()
    cancelled: List[bool] = []

    @registry.job("tests.work.v1", Work)
    def handle(job: Work, ctx: JobContext) -> None:
        cancelled.append(ctx.cancelled.wait(10))

    queue = raising("renew")(db, registry, options(lease=2, renew=0.1))
    job_id = enqueue(queue, Work("outage"))
    with pytest.raises(peewee.OperationalError):
        QueueWorker(queue).run_once(QUEUE)
    assert cancelled == [True]
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)


@pytest.mark.parametrize("method", ["claim", "complete", "fail"])
def test_database_errors_on_claim_and_acknowledgement_propagate(db, method):
    registry = JobRegistry()

    @registry.job("tests.work.v1", Work)
    def handle(job: Work, ctx: JobContext) -> None:
        if job.label == "fail":
            raise RuntimeError("a job failure, not a fault")

    producer = DatabaseQueue(db, registry, options())
    for _ in range(2):  # one for run_once, one for run
        enqueue(producer, Work(method))
    # run() claims with claim_batch and writes completions in batches (complete_many);
    # run_once claims with claim and completes one by one.
    also = {"claim": "claim_batch", "complete": "complete_many"}.get(method, method)
    broken = raising(method, also)(db, registry, options())
    with pytest.raises(peewee.OperationalError):
        QueueWorker(broken).run_once(QUEUE)
    with pytest.raises(peewee.OperationalError):  # the loop does not swallow it either
        QueueWorker(broken, poll_interval=0.1).run(QUEUE)
