"""Handler outcomes Snooze(delay) and Discard(), sync and async, on every database:
states, attempts, due times (frozen time), last failure, counters, fencing."""
from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, List

import pytest
from freezegun import freeze_time

from caravel_lite import (DatabaseQueue, Discard, Failure, JobContext, JobRegistry, JobState,
                          QueueWorker, Snooze)
from caravel_lite.errors import InvalidField

from tests.worker.helpers import QUEUE, enqueue, options, status
from tests.worker.metrics import Metrics

START = datetime(2031, 5, 1, 12, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Step:
    n: int


def _sync(outcome: Callable[[], Any]) -> Callable[..., None]:
    def handle(job: Step, ctx: JobContext) -> None:
        outcome()
    return handle


def _async(outcome: Callable[[], Any]) -> Callable[..., Any]:
    async def handle(job: Step, ctx: JobContext) -> None:
        await asyncio.sleep(0)
        outcome()
    return handle


KINDS = {"sync": _sync, "async": _async}


def _raise(exc: BaseException) -> Callable[[], None]:
    def go() -> None:
        raise exc
    return go


@pytest.mark.parametrize("kind", KINDS)
def test_snooze_puts_the_job_back_due_later_with_the_attempt_given_back(db, kind):
    metrics = Metrics()
    registry = JobRegistry()
    snoozes: List[int] = []

    def outcome() -> None:
        snoozes.append(1)
        if len(snoozes) <= 2:
            raise Snooze(timedelta(seconds=90))

    registry.register("tests.step.v1", Step, KINDS[kind](outcome))
    with freeze_time(START, tick=False) as frozen:
        queue = DatabaseQueue(db, registry, options(lease=30, max_attempts=2),
                              telemetry=metrics.telemetry)
        job_id = enqueue(queue, Step(1))
        worker = QueueWorker(queue)
        assert worker.run_once(QUEUE) is True
        found = status(queue, job_id)
        assert (found.state, found.attempts, found.last_failure) == (JobState.PENDING, 0, None)
        assert found.available_at == START + timedelta(seconds=90)
        assert worker.run_once(QUEUE) is False  # not due yet
        frozen.tick(timedelta(seconds=90))
        # Snoozed twice with max_attempts=2: snoozes never use up the attempts.
        assert worker.run_once(QUEUE) is True
        frozen.tick(timedelta(seconds=90))
        assert worker.run_once(QUEUE) is True
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.COMPLETED, 1)
    assert metrics.totals() == Counter({("accepted", None): 1, ("claimed", None): 3,
                                        ("snoozed", None): 2, ("completed", None): 1})


def test_snooze_keeps_the_last_failure(db):
    registry = JobRegistry()
    runs: List[int] = []

    def handle(job: Step, ctx: JobContext) -> None:
        runs.append(ctx.attempt)
        if len(runs) == 1:
            raise RuntimeError("first attempt fails")
        raise Snooze(0)

    registry.register("tests.step.v1", Step, handle)
    with freeze_time(START, tick=False) as frozen:
        queue = DatabaseQueue(db, registry, options(lease=30, retry_delay=timedelta(seconds=1)))
        job_id = enqueue(queue, Step(1))
        worker = QueueWorker(queue)
        assert worker.run_once(QUEUE)
        frozen.tick(timedelta(seconds=1))
        assert worker.run_once(QUEUE)
        found = status(queue, job_id)
        assert (found.state, found.attempts, found.last_failure) == (
            JobState.PENDING, 1, Failure.HANDLER_FAILED)
        assert found.available_at == START + timedelta(seconds=1)
    assert runs == [1, 2]


@pytest.mark.parametrize("kind", KINDS)
def test_discard_dead_letters_at_once_with_attempts_left(db, kind):
    metrics = Metrics()
    registry = JobRegistry()
    registry.register("tests.step.v1", Step, KINDS[kind](_raise(Discard())))
    queue = DatabaseQueue(db, registry, options(lease=30, max_attempts=5),
                          telemetry=metrics.telemetry)
    job_id = enqueue(queue, Step(1))
    worker = QueueWorker(queue)
    assert worker.run_once(QUEUE) is True
    assert worker.run_once(QUEUE) is False
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (
        JobState.DEAD_LETTER, 1, Failure.DISCARDED)
    assert metrics.totals() == Counter({
        ("accepted", None): 1, ("claimed", None): 1,
        ("failed", "discarded"): 1, ("deadlettered", "discarded"): 1})
    assert queue.replay(job_id, QUEUE, "tenant-a") is True  # a dead letter like any other


@pytest.mark.parametrize("outcome", [Snooze(5), Discard()], ids=["snooze", "discard"])
def test_outcomes_are_fenced_by_the_lease(db, connect, outcome):
    intruder = connect()
    registry = JobRegistry()

    def handle(job: Step, ctx: JobContext) -> None:
        intruder.execute_sql(
            f"UPDATE caravel_jobs SET lease_token = {intruder.param} WHERE id = {intruder.param}",
            ("stolen", str(ctx.job_id)))
        raise outcome

    registry.register("tests.step.v1", Step, handle)
    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(1))
    assert QueueWorker(queue).run_once(QUEUE) is True
    found = status(queue, job_id)
    assert (found.state, found.attempts, found.last_failure) == (JobState.LEASED, 1, None)


@pytest.mark.parametrize("delay", [-1, timedelta(days=31), "5", True, None])
def test_snooze_delays_are_validated(delay):
    with pytest.raises(InvalidField) as raised:
        Snooze(delay)
    assert raised.value.field == "delay"


def test_snooze_accepts_seconds_and_timedeltas():
    assert Snooze(1.5).delay == timedelta(seconds=1.5)
    assert Snooze(timedelta(minutes=2)).delay == timedelta(minutes=2)
