"""run_once: scope, tenant, decoding and failure categories, on every database."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import timedelta
from typing import List

import pytest

from caravel_lite import (DatabaseQueue, Failure, JobContext, JobRegistry,
                          JobState, QueueWorker, open_database)
from caravel_lite.errors import InvalidField
from caravel_lite.testing import ManualClock

from tests.worker.helpers import QUEUE, TENANT, enqueue, options, status


@dataclass(frozen=True)
class Order:
    order_id: int
    tenant_id: str  # a tenant inside the payload: handlers must ignore it


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Ghost:
    name: str


def test_empty_queue_claims_nothing(db):
    worker = QueueWorker(DatabaseQueue(db, JobRegistry(), options()))
    assert worker.run_once(QUEUE) is False


def test_each_job_runs_in_its_own_scope_with_the_envelope_tenant(db):
    registry = JobRegistry()
    events: List[str] = []
    seen: List[JobContext] = []

    @registry.job("tests.order.v1", Order)
    def handle(job: Order, ctx: JobContext) -> None:
        events.append(f"handle {job.order_id}")
        seen.append(ctx)
        if job.order_id == 2:
            raise RuntimeError("handler broke")

    @contextlib.contextmanager
    def scope(ctx: JobContext):
        events.append(f"enter {ctx.job_id}")
        try:
            yield
        finally:
            events.append(f"exit {ctx.job_id}")

    queue = DatabaseQueue(db, registry, options())
    first = enqueue(queue, Order(1, tenant_id="payload-tenant"))
    second = enqueue(queue, Order(2, tenant_id="payload-tenant"), tenant="tenant-b")
    worker = QueueWorker(queue, scope=scope)
    assert worker.run_once(QUEUE) is True
    assert worker.run_once(QUEUE) is True
    assert worker.run_once(QUEUE) is False

    # Jobs enqueued in the same millisecond may come out in either order.
    number = {first: 1, second: 2}
    assert events == [line for ctx in seen for line in (
        f"enter {ctx.job_id}", f"handle {number[ctx.job_id]}", f"exit {ctx.job_id}")]
    assert sorted((number[c.job_id], c.tenant_id, c.attempt, c.queue) for c in seen) == [
        (1, TENANT, 1, QUEUE), (2, "tenant-b", 1, QUEUE)]
    assert status(queue, first).state is JobState.COMPLETED
    failed = status(queue, second, tenant="tenant-b")
    assert (failed.state, failed.last_failure, failed.attempts) == (
        JobState.PENDING, Failure.HANDLER_FAILED, 1)


def test_a_scope_factory_without_arguments_is_called_per_job(db):
    registry = JobRegistry()
    registry.register("tests.text.v1", Text, lambda job, ctx: None)
    entered: List[int] = []

    @contextlib.contextmanager
    def scope():
        entered.append(1)
        yield

    queue = DatabaseQueue(db, registry, options())
    for text in ("a", "b"):
        enqueue(queue, Text(text))
    worker = QueueWorker(queue, scope=scope)
    while worker.run_once(QUEUE):
        pass
    assert entered == [1, 1]


def test_unknown_wire_name_fails_without_a_handler(db):
    producer_registry = JobRegistry()
    producer_registry.register("tests.ghost.v1", Ghost, lambda job, ctx: None)
    job_id = enqueue(DatabaseQueue(db, producer_registry, options()), Ghost("boo"))

    calls: List[object] = []
    worker_registry = JobRegistry()
    worker_registry.register("tests.text.v1", Text, lambda job, ctx: calls.append(job))
    queue = DatabaseQueue(db, worker_registry, options())
    assert QueueWorker(queue).run_once(QUEUE) is True
    found = status(queue, job_id)
    assert (found.state, found.last_failure, found.attempts) == (
        JobState.PENDING, Failure.UNKNOWN_JOB_TYPE, 1)
    assert calls == []


def test_payload_of_the_wrong_shape_fails_as_invalid_payload(db):
    producer_registry = JobRegistry()
    producer_registry.register("tests.shape.v1", Ghost, lambda job, ctx: None)
    job_id = enqueue(DatabaseQueue(db, producer_registry, options()), Ghost("boo"))

    calls: List[object] = []
    worker_registry = JobRegistry()  # same wire name, another type: {"name"} != Text
    worker_registry.register("tests.shape.v1", Text, lambda job, ctx: calls.append(job))
    queue = DatabaseQueue(db, worker_registry, options())
    assert QueueWorker(queue).run_once(QUEUE) is True
    found = status(queue, job_id)
    assert (found.state, found.last_failure) == (JobState.PENDING, Failure.INVALID_PAYLOAD)
    assert calls == []


def test_payload_over_the_current_limit_fails_as_invalid_payload(db):
    calls: List[object] = []
    registry = JobRegistry()
    registry.register("tests.text.v1", Text, lambda job, ctx: calls.append(job))
    job_id = enqueue(DatabaseQueue(db, registry, options(max_payload_bytes=4096)),
                     Text("x" * 2000))
    small = DatabaseQueue(db, registry, options(max_payload_bytes=1000))
    assert QueueWorker(small).run_once(QUEUE) is True
    found = status(small, job_id)
    assert (found.state, found.last_failure) == (JobState.PENDING, Failure.INVALID_PAYLOAD)
    assert calls == []


def test_failure_on_the_last_attempt_dead_letters(db):
    registry = JobRegistry()

    @registry.job("tests.text.v1", Text)
    def handle(job: Text, ctx: JobContext) -> None:
        raise ValueError("nope")

    queue = DatabaseQueue(db, registry, options(max_attempts=1))
    job_id = enqueue(queue, Text("a"))
    assert QueueWorker(queue).run_once(QUEUE) is True
    found = status(queue, job_id)
    assert (found.state, found.last_failure) == (JobState.DEAD_LETTER, Failure.HANDLER_FAILED)


class JumpingQueue(DatabaseQueue):
    """Its clock jumps past the lease right after each claim (a stalled worker)."""

    def claim(self, queue):
        lease = super().claim(queue)
        if lease is not None:
            self.clock.advance(self.options.lease_duration)
        return lease


def test_lease_expired_before_the_handler_started_writes_nothing(db):
    calls: List[object] = []
    registry = JobRegistry()
    registry.register("tests.text.v1", Text, lambda job, ctx: calls.append(job))
    clock = ManualClock()
    queue = JumpingQueue(db, registry, options(), clock=clock)
    job_id = enqueue(queue, Text("a"))
    assert QueueWorker(queue).run_once(QUEUE) is True
    assert calls == []
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)


def test_handler_ending_after_its_deadline_is_not_completed(db):
    clock = ManualClock()
    cancelled: List[bool] = []
    registry = JobRegistry()

    @registry.job("tests.text.v1", Text)
    def handle(job: Text, ctx: JobContext) -> None:
        clock.advance(timedelta(seconds=3))  # past the 2 s lease
        cancelled.append(ctx.cancelled.wait(5))

    queue = DatabaseQueue(db, registry, options(), clock=clock)
    job_id = enqueue(queue, Text("a"))
    assert QueueWorker(queue).run_once(QUEUE) is True
    assert cancelled == [True]
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)


@pytest.mark.parametrize("value", [0.05, 301, -1, "1", True, None, timedelta(minutes=6)])
def test_poll_interval_is_validated(value):
    queue = DatabaseQueue(open_database("sqlite:///:memory:"), JobRegistry())
    with pytest.raises(InvalidField) as raised:
        QueueWorker(queue, poll_interval=value)
    assert raised.value.field == "poll_interval"


def test_poll_interval_accepts_seconds_and_timedeltas():
    queue = DatabaseQueue(open_database("sqlite:///:memory:"), JobRegistry())
    assert QueueWorker(queue, poll_interval=timedelta(milliseconds=100)).poll_interval == 0.1
    assert QueueWorker(queue, poll_interval=300).poll_interval == 300.0


def test_freezegun_drives_the_lease_deadline(db):
    from freezegun import freeze_time

    seen: List[bool] = []
    registry = JobRegistry()
    with freeze_time("2031-05-01 12:00:00", tz_offset=0) as frozen:
        @registry.job("tests.text.v1", Text)
        def handle(job: Text, ctx: JobContext) -> None:
            if job.text == "slow":
                frozen.tick(timedelta(seconds=3))  # past the 2 s lease
                seen.append(ctx.cancelled.wait(5))
            else:
                seen.append(ctx.cancelled.is_set())

        queue = DatabaseQueue(db, registry, options(renew=0.5))
        fast = enqueue(queue, Text("fast"))
        assert QueueWorker(queue).run_once(QUEUE) is True
        slow = enqueue(queue, Text("slow"))
        assert QueueWorker(queue).run_once(QUEUE) is True
        assert seen == [False, True]
        assert status(queue, fast).state is JobState.COMPLETED
        assert status(queue, slow).state is JobState.LEASED
