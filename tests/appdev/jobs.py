"""Job types and a small registry builder for the application-developer tests."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import List, Optional

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, QueueOptions
from caravel_lite.testing import ManualClock

QUEUE = "mail"
TENANT = "acme"


@dataclass(frozen=True)
class SendEmail:
    to: str


@dataclass(frozen=True)
class Flaky:
    """Fails its first ``failures`` attempts, then succeeds."""

    name: str
    failures: int


@dataclass(frozen=True)
class Chain:
    """Enqueues ``Chain(left - 1)`` onto ``queue`` until ``left`` is 0."""

    left: int
    queue: str


def options(**extra: object) -> QueueOptions:
    values = dict(max_attempts=3, retry_delay=timedelta(seconds=10),
                  max_retry_delay=timedelta(minutes=5))
    values.update(extra)
    return QueueOptions(**values)  # type: ignore[arg-type]


class Recorder:
    """A registry whose handlers write down what they ran."""

    def __init__(self) -> None:
        self.registry = JobRegistry()
        self.sent: List[str] = []
        self.attempts: List[tuple] = []
        self.queue: Optional[DatabaseQueue] = None  # set for Chain's enqueues

        @self.registry.job("tests.send-email.v1", SendEmail)
        def send(job: SendEmail, ctx: JobContext) -> None:
            self.sent.append(job.to)

        @self.registry.job("tests.flaky.v1", Flaky)
        def flaky(job: Flaky, ctx: JobContext) -> None:
            self.attempts.append((job.name, ctx.attempt))
            if ctx.attempt <= job.failures:
                raise RuntimeError(f"attempt {ctx.attempt} fails")

        @self.registry.job("tests.chain.v1", Chain)
        def chain(job: Chain, ctx: JobContext) -> None:
            from caravel_lite import Dispatch
            self.sent.append(f"chain {job.left}")
            if job.left > 0:
                assert self.queue is not None
                self.queue.enqueue(Chain(job.left - 1, job.queue),
                                   Dispatch(job.queue, tenant_id=ctx.tenant_id))


def make_queue(db, recorder: Recorder, clock: ManualClock, **extra: object) -> DatabaseQueue:
    queue = DatabaseQueue(db, recorder.registry, options(**extra), clock=clock)
    recorder.queue = queue
    return queue
