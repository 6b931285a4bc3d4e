"""The failure history on every database: what each failed attempt keeps (time,
attempt, category, type, site), never the message; across retries and a replay; the
describe_failure opt-in and its 1 KiB cap; the last 20 per job; nothing on success
or for a stale lease."""
from __future__ import annotations

import json
from datetime import timedelta

import pytest

from caravel_lite import Dispatch, Failure, InvalidField, JobState, QueueAdmin
from caravel_lite.failures import DESCRIPTION_BYTES, KEEP
from caravel_lite.testing import ManualClock
from tests.admin.seed import START, Mail, make_queue
from tests.contract.jobs import row_count

SECRET = "password=hunter2 for alice@example.com"


class DeliveryRefused(Exception):
    """An application's own exception type (qualified name includes this module)."""


def send_receipt(n: int) -> None:
    raise DeliveryRefused(SECRET)


def parse_reply(text: str) -> object:
    return json.loads(text)  # raises inside the standard library


def _raised(action, *args) -> BaseException:
    try:
        action(*args)
    except Exception as exc:
        return exc
    raise AssertionError("did not raise")


def _line_of(function, text: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(function)
    return start + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture
def clock():
    return ManualClock(START)


def _all_text(db) -> str:
    rows = db.execute_sql("SELECT * FROM caravel_failures").fetchall()
    rows += db.execute_sql("SELECT * FROM caravel_jobs").fetchall()
    return repr(rows)


def test_three_failed_attempts_and_a_replay_keep_type_site_and_attempt(db, clock):
    queue = make_queue(db, clock, max_attempts=3, retry_delay=timedelta(seconds=1),
                       max_retry_delay=timedelta(seconds=1))
    admin = QueueAdmin(db, clock=clock)
    job_id = queue.enqueue(Mail(1), Dispatch(queue="mail", tenant_id="t")).job_id
    times = []
    for attempt in range(1, 4):
        lease = queue.claim("mail")
        assert lease.attempt == attempt
        clock.advance(timedelta(milliseconds=100))
        times.append(clock())
        assert queue.fail(lease, Failure.HANDLER_FAILED, error=_raised(send_receipt, 1))
        clock.advance(timedelta(seconds=1))
    assert admin.job(job_id).state is JobState.DEAD_LETTER
    assert admin.replay_many(queue="mail") == 1
    lease = queue.claim("mail")
    assert queue.fail(lease, Failure.INVALID_PAYLOAD, error=_raised(parse_reply, "{"))

    history = admin.job(job_id).failures
    assert [(f.seq, f.attempt, f.replays) for f in history] == [(1, 1, 0), (2, 2, 0),
                                                                (3, 3, 0), (4, 1, 1)]
    assert [f.failed_at for f in history[:3]] == times
    assert [f.category for f in history] == [Failure.HANDLER_FAILED] * 3 + [
        Failure.INVALID_PAYLOAD]
    here = __name__
    assert history[0].error_type == f"{here}.DeliveryRefused"
    assert history[0].site == f"{here}:send_receipt:{_line_of(send_receipt, 'raise')}"
    # json raised it, but the site is the application's call into json
    assert history[3].error_type == "json.decoder.JSONDecodeError"
    assert history[3].site == f"{here}:parse_reply:{_line_of(parse_reply, 'json.loads')}"
    assert all(f.description is None for f in history)
    assert SECRET not in _all_text(db) and "Expecting" not in _all_text(db)


def test_success_and_stale_leases_write_no_history(db, clock):
    queue = make_queue(db, clock, max_attempts=3, lease_duration=timedelta(seconds=5))
    queue.enqueue(Mail(1), Dispatch(queue="mail", tenant_id="t"))
    assert queue.complete(queue.claim("mail"))
    queue.enqueue(Mail(2), Dispatch(queue="mail", tenant_id="t"))
    stale = queue.claim("mail")
    clock.advance(timedelta(seconds=5))  # expired: no longer owned
    assert queue.fail(stale, Failure.HANDLER_FAILED, error=ValueError("x")) is False
    assert row_count(db, "caravel_failures") == 0
    taken = queue.claim("mail")
    assert taken.attempt == 2 and queue.fail(taken, Failure.HANDLER_FAILED)
    (record,) = QueueAdmin(db, clock=clock).job(taken.job_id).failures
    assert (record.attempt, record.error_type, record.site) == (2, None, None)


def test_describe_failure_is_opt_in_and_capped_at_1_kib(db, clock):
    texts = {}

    def describe(exc: BaseException):
        return texts.get(str(exc))

    queue = make_queue(db, clock, max_attempts=10, describe_failure=describe)
    admin = QueueAdmin(db, clock=clock)
    job_id = queue.enqueue(Mail(1), Dispatch(queue="mail", tenant_id="t")).job_id
    long_text = "é" * 600  # 1200 bytes of UTF-8
    texts.update({"short": "recipient mailbox full", "long": long_text,
                  "none": None, "blank": ""})
    for message in ("short", "long", "none", "blank"):
        clock.advance(timedelta(minutes=10))
        assert queue.fail(queue.claim("mail"), Failure.HANDLER_FAILED,
                          error=RuntimeError(message))
    descriptions = [f.description for f in admin.job(job_id).failures]
    assert descriptions[0] == "recipient mailbox full"
    assert descriptions[1] == "é" * (DESCRIPTION_BYTES // 2)
    assert len(descriptions[1].encode("utf-8")) == DESCRIPTION_BYTES
    assert descriptions[2:] == [None, None]


@pytest.mark.parametrize("describe", [
    lambda exc: 1 / 0,           # the describer itself fails
    lambda exc: {"not": "text"},  # not a str
])
def test_a_faulty_describer_never_stops_the_failure_being_kept(db, clock, describe):
    queue = make_queue(db, clock, max_attempts=2, describe_failure=describe)
    job_id = queue.enqueue(Mail(1), Dispatch(queue="mail", tenant_id="t")).job_id
    assert queue.fail(queue.claim("mail"), Failure.HANDLER_FAILED, error=KeyError("k"))
    (record,) = QueueAdmin(db, clock=clock).job(job_id).failures
    assert record.error_type == "KeyError" and record.description is None


def test_only_the_last_twenty_failures_are_kept(db, clock):
    queue = make_queue(db, clock, max_attempts=100, retry_delay=timedelta(milliseconds=1),
                       max_retry_delay=timedelta(milliseconds=1))
    job_id = queue.enqueue(Mail(1), Dispatch(queue="mail", tenant_id="t")).job_id
    for _ in range(KEEP + 5):
        assert queue.fail(queue.claim("mail"), Failure.HANDLER_FAILED, error=OSError())
        clock.advance(timedelta(milliseconds=1))
    history = QueueAdmin(db, clock=clock).job(job_id).failures
    assert [f.attempt for f in history] == list(range(6, KEEP + 6))
    assert row_count(db, "caravel_failures") == KEEP


def test_fail_checks_its_error_argument(db, clock):
    queue = make_queue(db, clock, max_attempts=2)
    queue.enqueue(Mail(1), Dispatch(queue="mail", tenant_id="t"))
    lease = queue.claim("mail")
    with pytest.raises(InvalidField) as info:
        queue.fail(lease, Failure.HANDLER_FAILED, error="boom")
    assert info.value.field == "error"
    assert row_count(db, "caravel_failures") == 0
    assert queue.fail(lease, Failure.HANDLER_FAILED)


def test_describe_failure_must_be_callable():
    from caravel_lite import QueueOptions

    with pytest.raises(InvalidField) as info:
        QueueOptions(describe_failure="repr")
    assert info.value.field == "describe_failure"
