"""``async def`` handlers: run on an event loop, cancelled for real at the deadline."""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import List

from caravel_lite import DatabaseQueue, Failure, JobContext, JobRegistry, JobState, QueueWorker

from tests.worker.helpers import QUEUE, TENANT, enqueue, options, status


@dataclass(frozen=True)
class Ping:
    value: int


def test_async_handler_completes(db):
    registry = JobRegistry()
    seen: List[tuple] = []

    @registry.job("tests.ping.v1", Ping)
    async def handle(job: Ping, ctx: JobContext) -> None:
        await asyncio.sleep(0)
        seen.append((job.value, ctx.tenant_id, ctx.attempt))

    queue = DatabaseQueue(db, registry, options())
    job_id = enqueue(queue, Ping(7))
    assert QueueWorker(queue).run_once(QUEUE) is True
    assert seen == [(7, TENANT, 1)]
    assert status(queue, job_id).state is JobState.COMPLETED


def test_async_handler_failure_is_recorded(db):
    registry = JobRegistry()

    @registry.job("tests.ping.v1", Ping)
    async def handle(job: Ping, ctx: JobContext) -> None:
        await asyncio.sleep(0)
        raise LookupError("missing")

    queue = DatabaseQueue(db, registry, options())
    job_id = enqueue(queue, Ping(1))
    assert QueueWorker(queue).run_once(QUEUE) is True
    found = status(queue, job_id)
    assert (found.state, found.last_failure) == (JobState.PENDING, Failure.HANDLER_FAILED)


def test_async_handler_is_cancelled_at_the_lease_deadline(db):
    registry = JobRegistry()
    seen: List[bool] = []

    @registry.job("tests.ping.v1", Ping)
    async def handle(job: Ping, ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            seen.append(ctx.cancelled.is_set())
            raise

    queue = DatabaseQueue(db, registry, options(lease=1))
    job_id = enqueue(queue, Ping(2))
    assert QueueWorker(queue).run_once(QUEUE) is True
    assert seen == [True]
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)
