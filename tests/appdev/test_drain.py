"""drain(): the real worker path, clock moved through back-offs, counts from the
queue's own counters; on every database."""
from __future__ import annotations

from datetime import timedelta

import pytest

from caravel_lite import DatabaseQueue, Dispatch, JobRegistry, JobState
from caravel_lite.errors import InvalidField
from caravel_lite.testing import DrainResult, ManualClock, drain

from tests.appdev.jobs import QUEUE, TENANT, Chain, Flaky, Recorder, SendEmail, make_queue


def dispatch(queue: str = QUEUE, **extra) -> Dispatch:
    return Dispatch(queue, tenant_id=TENANT, **extra)


def state_of(queue: DatabaseQueue, job_id, queue_name: str = QUEUE):
    status = queue.status(job_id, queue=queue_name, tenant_id=TENANT)
    assert status is not None
    return status


def test_runs_every_due_job_through_the_handlers(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    ids = [queue.enqueue(SendEmail(f"u{i}@example.com"), dispatch()).job_id for i in range(3)]
    result = drain(queue, QUEUE)
    assert result == DrainResult(processed=3, completed=3)
    assert recorder.sent == ["u0@example.com", "u1@example.com", "u2@example.com"]
    assert all(state_of(queue, i).state is JobState.COMPLETED for i in ids)
    assert drain(queue, QUEUE) == DrainResult()


def test_without_a_clock_a_retry_waits_for_its_back_off(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    job_id = queue.enqueue(Flaky("a", failures=1), dispatch()).job_id
    result = drain(queue, QUEUE)
    assert (result.processed, result.failed, result.retried, result.completed) == (1, 1, 1, 0)
    assert result.advanced == timedelta(0)
    status = state_of(queue, job_id)
    assert (status.state, status.attempts) == (JobState.PENDING, 1)
    assert status.available_at == clock() + timedelta(seconds=10)


def test_with_the_clock_a_job_is_retried_to_success(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    job_id = queue.enqueue(Flaky("a", failures=2), dispatch()).job_id
    result = drain(queue, QUEUE, clock=clock)
    # retry_delay 10 s doubled per attempt: 10 s, then 20 s.
    assert result == DrainResult(processed=3, completed=1, failed=2, retried=2,
                                 advanced=timedelta(seconds=30))
    assert recorder.attempts == [("a", 1), ("a", 2), ("a", 3)]
    assert state_of(queue, job_id).state is JobState.COMPLETED


def test_with_the_clock_a_job_is_retried_to_the_dead_letter_state(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    job_id = queue.enqueue(Flaky("a", failures=99), dispatch()).job_id
    result = drain(queue, QUEUE, clock=clock)
    assert result == DrainResult(processed=3, failed=3, retried=2, dead_lettered=1,
                                 advanced=timedelta(seconds=30))
    status = state_of(queue, job_id)
    assert (status.state, status.attempts) == (JobState.DEAD_LETTER, 3)


def test_a_job_failing_before_its_handler_is_counted_too(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock, max_attempts=1)
    stranger = JobRegistry()
    stranger.register("tests.not-here.v1", Chain, lambda job, ctx: None)
    other = DatabaseQueue(db, stranger, queue.options, clock=clock)
    other.enqueue(Chain(0, QUEUE), dispatch())
    assert drain(queue, QUEUE) == DrainResult(processed=1, failed=1, dead_lettered=1)


def test_scheduled_jobs_wait_unless_asked_for(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    later = clock() + timedelta(hours=1)
    queue.enqueue(SendEmail("later@example.com"), dispatch(not_before=later))
    assert drain(queue, QUEUE, clock=clock) == DrainResult()
    result = drain(queue, QUEUE, clock=clock, with_scheduled=True)
    assert result == DrainResult(processed=1, completed=1, advanced=timedelta(hours=1))
    assert clock() == later


def test_earlier_queue_names_first_and_every_queue_when_none_is_named(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    queue.enqueue(SendEmail("b1"), dispatch("b"))
    queue.enqueue(SendEmail("a1"), dispatch("a"))
    queue.enqueue(SendEmail("b2"), dispatch("b"))
    queue.enqueue(SendEmail("c1"), dispatch("c"))
    assert drain(queue, "b", "a").completed == 3
    assert recorder.sent == ["b1", "b2", "a1"]
    assert drain(queue).completed == 1
    assert recorder.sent[-1] == "c1"


def test_max_jobs_bounds_a_job_that_keeps_enqueueing(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    queue.enqueue(Chain(10, QUEUE), dispatch())
    result = drain(queue, QUEUE, max_jobs=3)
    assert (result.processed, result.completed, result.limit_reached) == (3, 3, True)
    assert drain(queue, QUEUE).limit_reached is False
    assert recorder.sent[-1] == "chain 0"


def test_the_clock_must_be_the_queues(db):
    recorder = Recorder()
    queue = make_queue(db, recorder, ManualClock())
    with pytest.raises(InvalidField, match="clock"):
        drain(queue, QUEUE, clock=ManualClock())
    with pytest.raises(InvalidField, match="max_jobs"):
        drain(queue, QUEUE, max_jobs=0)
    with pytest.raises(InvalidField, match="queue_names"):
        drain(queue, "")


def test_the_callers_queue_keeps_its_telemetry(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    before = queue.telemetry
    queue.enqueue(SendEmail("x"), dispatch())
    drain(queue, QUEUE)
    assert queue.telemetry is before


def test_snoozed_and_discarded_jobs_are_counted(db):
    from dataclasses import dataclass

    from caravel_lite import Discard, JobContext, Snooze

    @dataclass(frozen=True)
    class Nap:
        minutes: int

    @dataclass(frozen=True)
    class Hopeless:
        why: str

    recorder, clock = Recorder(), ManualClock()

    @recorder.registry.job("tests.nap.v1", Nap)
    def nap(job: Nap, ctx: JobContext) -> None:
        recorder.attempts.append(("nap", ctx.attempt))
        if len(recorder.attempts) == 1:
            raise Snooze(timedelta(minutes=job.minutes))

    @recorder.registry.job("tests.hopeless.v1", Hopeless)
    def hopeless(job: Hopeless, ctx: JobContext) -> None:
        raise Discard()

    queue = make_queue(db, recorder, clock)
    nap_id = queue.enqueue(Nap(5), dispatch()).job_id
    assert drain(queue, QUEUE, clock=clock) == DrainResult(processed=1, snoozed=1)
    status = state_of(queue, nap_id)
    assert (status.state, status.attempts) == (JobState.PENDING, 0)
    result = drain(queue, QUEUE, clock=clock, with_scheduled=True)
    assert result == DrainResult(processed=1, completed=1, advanced=timedelta(minutes=5))
    assert recorder.attempts == [("nap", 1), ("nap", 1)]  # the snooze gave its attempt back

    hopeless_id = queue.enqueue(Hopeless("bad input"), dispatch()).job_id
    assert drain(queue, QUEUE, clock=clock) == DrainResult(processed=1, failed=1,
                                                           dead_lettered=1)
    assert state_of(queue, hopeless_id).state is JobState.DEAD_LETTER


def test_the_scope_wraps_each_job(db):
    import contextlib

    from caravel_lite import JobContext

    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    ids = [queue.enqueue(SendEmail(f"s{i}"), dispatch()).job_id for i in range(2)]
    entered = []

    @contextlib.contextmanager
    def scope(ctx: JobContext):
        entered.append(ctx.job_id)
        yield

    assert drain(queue, QUEUE, scope=scope).completed == 2
    assert entered == ids


def test_async_handlers_run_also_when_drain_is_called_from_a_coroutine(db):
    import asyncio
    from dataclasses import dataclass

    from caravel_lite import JobContext

    @dataclass(frozen=True)
    class Ping:
        n: int

    recorder, clock = Recorder(), ManualClock()

    @recorder.registry.job("tests.ping.v1", Ping)
    async def ping(job: Ping, ctx: JobContext) -> None:
        await asyncio.sleep(0)
        recorder.sent.append(f"ping {job.n}")

    queue = make_queue(db, recorder, clock)
    queue.enqueue(Ping(1), dispatch())
    assert drain(queue, QUEUE).completed == 1

    async def an_async_test() -> DrainResult:
        await queue.aenqueue(Ping(2), dispatch())
        try:
            return drain(queue, QUEUE)  # inside a running loop: drains on a helper thread
        finally:
            await queue.aclose()
    assert asyncio.run(an_async_test()).completed == 1
    assert recorder.sent == ["ping 1", "ping 2"]
