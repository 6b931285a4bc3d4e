"""InlineQueue: enqueue runs the job through the worker path at once, or when the
caller's transaction commits, never for one that rolls back; on every database."""
from __future__ import annotations

import peewee
import pytest

from caravel_lite import Dispatch, JobState
from caravel_lite.errors import InvalidField
from caravel_lite.testing import InlineQueue, ManualClock, enqueued

from tests.appdev.jobs import QUEUE, TENANT, Chain, Flaky, Recorder, SendEmail, make_queue


def inline(db, recorder: Recorder, **extra) -> InlineQueue:
    queue = InlineQueue.like(make_queue(db, recorder, ManualClock(), **extra))
    recorder.queue = queue  # Chain's handler enqueues on it
    return queue


def here(to: str = "a@example.com"):
    return SendEmail(to), Dispatch(QUEUE, tenant_id=TENANT)


def test_outside_a_transaction_the_job_runs_before_enqueue_returns(db):
    recorder = Recorder()
    queue = inline(db, recorder)
    result = queue.enqueue(*here())
    assert recorder.sent == ["a@example.com"]
    status = queue.status(result.job_id, queue=QUEUE, tenant_id=TENANT)
    assert status is not None and status.state is JobState.COMPLETED
    assert queue.results[-1].completed == 1


def test_inside_a_transaction_it_runs_when_the_transaction_commits(db):
    recorder = Recorder()
    queue = inline(db, recorder)
    with db.atomic():
        queue.enqueue(*here())
        with db.atomic():  # a savepoint: still nothing until the outer commit
            queue.enqueue(*here("b@example.com"))
        assert recorder.sent == []
    assert recorder.sent == ["a@example.com", "b@example.com"]


def test_a_rolled_back_transaction_runs_nothing(db):
    recorder = Recorder()
    queue = inline(db, recorder)
    with pytest.raises(RuntimeError):
        with db.atomic():
            queue.enqueue(*here())
            raise RuntimeError("the request failed")
    assert recorder.sent == []
    assert enqueued(queue, QUEUE, state=None) == []
    queue.enqueue(*here("later@example.com"))  # nothing left over from the rollback
    assert recorder.sent == ["later@example.com"]


def test_a_rolled_back_savepoint_runs_nothing_of_its_own(db):
    recorder = Recorder()
    queue = inline(db, recorder)
    with db.atomic():
        queue.enqueue(*here("kept@example.com"))
        with pytest.raises(RuntimeError):
            with db.atomic():
                queue.enqueue(*here("dropped@example.com"))
                raise RuntimeError("inner step failed")
    assert recorder.sent == ["kept@example.com"]


def test_enqueue_many_and_jobs_enqueued_by_handlers(db):
    recorder = Recorder()
    queue = inline(db, recorder)
    queue.enqueue_many([here("x"), (Chain(2, "other"), Dispatch(QUEUE, tenant_id=TENANT))])
    # The chain continues on another queue: run by the same inline run, not nested.
    assert recorder.sent == ["x", "chain 2", "chain 1", "chain 0"]
    assert enqueued(queue, "other") == []


def test_a_failure_is_recorded_as_a_worker_records_it(db):
    recorder = Recorder()
    queue = inline(db, recorder)
    result = queue.enqueue(Flaky("f", failures=1), Dispatch(QUEUE, tenant_id=TENANT))
    status = queue.status(result.job_id, queue=QUEUE, tenant_id=TENANT)
    assert status is not None and (status.state, status.attempts) == (JobState.PENDING, 1)
    assert queue.results[-1].retried == 1


def test_a_repeated_key_runs_nothing_new(db):
    recorder = Recorder()
    queue = inline(db, recorder)
    job, where = SendEmail("once@example.com"), Dispatch(QUEUE, TENANT, idempotency_key="k")
    first = queue.enqueue(job, where)
    again = queue.enqueue(job, where)
    assert again.already_enqueued and again.job_id == first.job_id
    assert recorder.sent == ["once@example.com"]


def test_manual_commit_is_refused_before_anything_is_written(db):
    recorder = Recorder()
    queue = inline(db, recorder)
    with db.manual_commit():
        db.begin()
        with pytest.raises(InvalidField, match="manual_commit"):
            queue.enqueue(*here())
        db.rollback()
    assert enqueued(queue, QUEUE, state=None) == []


def test_like_keeps_the_queues_settings(db):
    base = make_queue(db, Recorder(), ManualClock(), max_attempts=7)
    copy = InlineQueue.like(base)
    assert (copy.db, copy.registry, copy.options, copy.clock, copy.telemetry) == (
        base.db, base.registry, base.options, base.clock, base.telemetry)
    with pytest.raises(InvalidField):
        InlineQueue.like(peewee.SqliteDatabase(":memory:"))  # type: ignore[arg-type]


def test_aenqueue_on_an_inline_queue_runs_the_job_before_it_returns(db):
    import asyncio

    recorder = Recorder()
    queue = inline(db, recorder)

    async def scenario() -> None:
        try:
            await queue.aenqueue(*here("async@example.com"))
            assert recorder.sent == ["async@example.com"]
        finally:
            await queue.aclose()
    asyncio.run(scenario())
