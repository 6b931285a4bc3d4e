"""enqueued(), assert_enqueued(), assert_not_enqueued(): decoded jobs with their
dispatch, and messages that show what was there; on every database."""
from __future__ import annotations

from datetime import timedelta

import pytest

from caravel_lite import Dispatch, Failure, JobState, Priority
from caravel_lite.errors import UnknownJobType
from caravel_lite.testing import (ManualClock, assert_enqueued, assert_not_enqueued, drain,
                                  enqueued)

from tests.appdev.jobs import QUEUE, TENANT, Flaky, Recorder, SendEmail, make_queue


def test_enqueued_decodes_jobs_with_their_dispatch_in_claim_order(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    later = clock() + timedelta(minutes=5)
    first = queue.enqueue(SendEmail("low@example.com"),
                          Dispatch(QUEUE, tenant_id=TENANT, priority=Priority.LOW)).job_id
    second = queue.enqueue(SendEmail("urgent@example.com"),
                           Dispatch(QUEUE, tenant_id="other", idempotency_key="k-1",
                                    priority=Priority.CRITICAL, not_before=later)).job_id
    queue.enqueue(Flaky("f", 0), Dispatch(QUEUE, tenant_id=TENANT))
    queue.enqueue(SendEmail("elsewhere@example.com"), Dispatch("other-queue", tenant_id=TENANT))

    found = enqueued(queue, QUEUE, SendEmail)
    assert [job.job_id for job in found] == [second, first]
    urgent = found[0]
    assert urgent.job == SendEmail("urgent@example.com")
    assert urgent.wire_name == "tests.send-email.v1"
    assert urgent.dispatch == Dispatch(QUEUE, tenant_id="other", idempotency_key="k-1",
                                       not_before=later, priority=Priority.CRITICAL)
    assert (urgent.state, urgent.attempts, urgent.max_attempts) == (JobState.PENDING, 0, 3)
    assert len(enqueued(queue, QUEUE)) == 3
    assert [job.job for job in enqueued(queue, QUEUE, tenant_id=TENANT)] == [
        Flaky("f", 0), SendEmail("low@example.com")]


def test_state_filter_and_failures(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock, max_attempts=1)
    queue.enqueue(Flaky("f", 5), Dispatch(QUEUE, tenant_id=TENANT))
    queue.enqueue(SendEmail("ok"), Dispatch(QUEUE, tenant_id=TENANT))
    drain(queue, QUEUE)
    assert enqueued(queue, QUEUE) == []
    dead = enqueued(queue, QUEUE, state=JobState.DEAD_LETTER)
    assert [(job.job, job.last_failure) for job in dead] == [(Flaky("f", 5),
                                                              Failure.HANDLER_FAILED)]
    assert {job.state for job in enqueued(queue, QUEUE, state=None)} == {
        JobState.DEAD_LETTER, JobState.COMPLETED}


def test_an_unregistered_type_is_an_error(db):
    queue = make_queue(db, Recorder(), ManualClock())

    class Unknown:
        pass
    with pytest.raises(UnknownJobType):
        enqueued(queue, QUEUE, Unknown)


def test_assert_enqueued_matches_by_type_instance_tenant_key_and_count(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    queue.enqueue(SendEmail("a@example.com"), Dispatch(QUEUE, tenant_id=TENANT,
                                                       idempotency_key="signup-1"))
    queue.enqueue(SendEmail("b@example.com"), Dispatch(QUEUE, tenant_id=TENANT))

    assert len(assert_enqueued(queue, QUEUE)) == 2
    assert len(assert_enqueued(queue, QUEUE, SendEmail, count=2)) == 2
    [match] = assert_enqueued(queue, QUEUE, SendEmail("a@example.com"))
    assert match.dispatch.idempotency_key == "signup-1"
    assert_enqueued(queue, QUEUE, SendEmail, tenant_id=TENANT, idempotency_key="signup-1",
                    count=1)
    assert_not_enqueued(queue, QUEUE, SendEmail("c@example.com"))
    assert_not_enqueued(queue, QUEUE, Flaky)
    assert_not_enqueued(queue, QUEUE, tenant_id="someone-else")
    assert_not_enqueued(queue, QUEUE, state=JobState.DEAD_LETTER)


def test_assert_enqueued_says_what_was_there(db):
    recorder, clock = Recorder(), ManualClock()
    queue = make_queue(db, recorder, clock)
    queue.enqueue(SendEmail("b@example.com"), Dispatch(QUEUE, tenant_id=TENANT,
                                                       idempotency_key="k-9"))
    with pytest.raises(AssertionError) as failure:
        assert_enqueued(queue, QUEUE, SendEmail("a@example.com"))
    message = str(failure.value)
    assert "expected SendEmail(to='a@example.com') on queue 'mail'" in message
    assert "found 0" in message
    assert "SendEmail(to='b@example.com') [tests.send-email.v1]" in message
    assert "tenant='acme' key='k-9'" in message and "priority=NORMAL" in message

    with pytest.raises(AssertionError, match=r"expected exactly 2 of a SendEmail.*found 1"):
        assert_enqueued(queue, QUEUE, SendEmail, count=2)

    with pytest.raises(AssertionError) as failure:
        assert_not_enqueued(queue, QUEUE, SendEmail)
    assert "expected nothing matching a SendEmail" in str(failure.value)
    assert "SendEmail(to='b@example.com')" in str(failure.value)


def test_an_empty_queue_is_reported_as_empty(db):
    queue = make_queue(db, Recorder(), ManualClock())
    with pytest.raises(AssertionError, match=r"jobs on queue 'mail' in state pending: none"):
        assert_enqueued(queue, QUEUE)
