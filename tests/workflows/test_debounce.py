"""Dispatch(debounce=window, debounce_key=K): while a job of the same (queue, tenant, K)
is pending and unstarted, an enqueue replaces its payload and moves its due time to
now + window; once it started, the next enqueue makes a new job. Race-safe between
processes: the unique dedup index keeps one unstarted holder per key."""
from __future__ import annotations

import multiprocessing
from datetime import datetime, timedelta, timezone

import pytest
from freezegun import freeze_time

from caravel_lite import Failure, InvalidField, QueueOutbox
from tests.workflows import procs
from tests.workflows.jobs import (QUEUE, TENANT, Step, count, make_queue, payload_of,
                                  state_of, to)

WINDOW = timedelta(seconds=10)
T0 = datetime(2026, 3, 1, 10, 0, tzinfo=timezone.utc)


def debounced(key: str = "user-7", **fields):
    return to(debounce=WINDOW, debounce_key=key, **fields)


def test_the_last_call_wins_and_runs_once_the_calls_stop_for_the_window(db):
    queue = make_queue(db)
    with freeze_time(T0, tick=False) as frozen:
        first = queue.enqueue(Step("a"), debounced())
        assert not first.already_enqueued
        for n, name in enumerate(("b", "c", "d"), 1):
            frozen.move_to(T0 + timedelta(seconds=5 * n))
            later = queue.enqueue(Step(name), debounced())
            assert (later.job_id, later.already_enqueued) == (first.job_id, True)
            assert queue.claim(QUEUE) is None  # each call moved it window further out
        frozen.move_to(T0 + timedelta(seconds=15) + WINDOW - timedelta(milliseconds=1))
        assert queue.claim(QUEUE) is None
        frozen.move_to(T0 + timedelta(seconds=15) + WINDOW)
        lease = queue.claim(QUEUE)
        assert lease is not None and lease.job_id == first.job_id
        assert payload_of(lease) == Step("d")
        # started: the next call makes a new debounced job; the running one keeps its run
        fresh = queue.enqueue(Step("e"), debounced())
        assert fresh.job_id != first.job_id and not fresh.already_enqueued
        assert queue.complete(lease)
        again = queue.enqueue(Step("f"), debounced())
        assert (again.job_id, again.already_enqueued) == (fresh.job_id, True)
    assert count(db) == 2


def test_keys_tenants_and_queues_debounce_apart(db):
    queue = make_queue(db)
    ids = {queue.enqueue(Step("a"), debounced()).job_id,
           queue.enqueue(Step("a"), debounced("user-8")).job_id,
           queue.enqueue(Step("a"), debounced(tenant_id="other")).job_id,
           queue.enqueue(Step("a"), debounced(queue="flows-2")).job_id}
    assert len(ids) == 4


def test_a_retried_job_has_started_and_is_not_rewritten(db):
    queue = make_queue(db, retry_delay=timedelta(milliseconds=1))
    with freeze_time(T0, tick=False) as frozen:
        first = queue.enqueue(Step("a"), debounced())
        frozen.move_to(T0 + WINDOW)
        lease = queue.claim(QUEUE)
        assert queue.fail(lease, Failure.HANDLER_FAILED)
        assert state_of(queue.db, first.job_id) == "pending"
        second = queue.enqueue(Step("b"), debounced())
        assert second.job_id != first.job_id


def test_inside_a_rolled_back_transaction_a_debounce_leaves_nothing(db):
    queue = make_queue(db)
    held = queue.enqueue(Step("a"), debounced())
    with pytest.raises(RuntimeError):
        with db.atomic():
            assert queue.enqueue(Step("b"), debounced()).job_id == held.job_id
            queue.enqueue(Step("x"), debounced("user-9"))
            raise RuntimeError("roll back")
    assert count(db) == 1
    row = db.execute_sql(f"SELECT payload FROM caravel_jobs WHERE id = {db.param}",
                         (str(held.job_id),)).fetchone()
    assert '"a"' in row[0]


@pytest.mark.parametrize("fields, field", [
    (dict(debounce=WINDOW), "debounce_key"),
    (dict(debounce_key="k"), "debounce"),
    (dict(debounce=5, debounce_key="k"), "debounce"),
    (dict(debounce=WINDOW, debounce_key=" "), "debounce_key"),
    (dict(debounce=WINDOW, debounce_key="k", idempotency_key="i"), "debounce"),
    (dict(debounce=WINDOW, debounce_key="k", not_before=T0), "debounce"),
])
def test_bad_debounce_is_refused_naming_the_field(db, fields, field):
    queue = make_queue(db)
    with pytest.raises(InvalidField) as raised:
        queue.enqueue(Step("a"), to(**fields))
    assert raised.value.field == field
    assert count(db) == 0


def test_calls_that_write_many_jobs_refuse_a_debounced_one(db):
    queue = make_queue(db)
    with pytest.raises(InvalidField) as raised:
        queue.enqueue_many([(Step("a"), to()), (Step("b"), debounced())])
    assert raised.value.field == "debounce"
    with pytest.raises(InvalidField) as raised:
        with db.atomic():
            QueueOutbox(db, queue.registry).stage(Step("a"), debounced())
    assert raised.value.field == "debounce"
    assert count(db) == 0


def test_two_processes_debouncing_one_key_leave_one_job_that_runs_the_last_payload(db_url,
                                                                                   db):
    queue = make_queue(db)
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    children = [context.Process(target=procs.enqueue_debounced,
                                args=(db_url, barrier, tag, 40, results))
                for tag in ("p1", "p2")]
    for child in children:
        child.start()
    answers = [results.get(timeout=procs.TIMEOUT) for _ in children]
    for child in children:
        child.join(procs.TIMEOUT)
        assert child.exitcode == 0
    ids = {job_id for answer in answers for job_id in answer}
    assert len(ids) == 1  # every call of both processes carried by one job
    last = queue.enqueue(Step("last"), to(debounce=procs.WINDOW, debounce_key="user-7"))
    assert str(last.job_id) in ids and last.already_enqueued
    assert count(db) == 1
    with freeze_time(datetime.now(timezone.utc) + procs.WINDOW + timedelta(seconds=1),
                     tick=False):
        lease = queue.claim(QUEUE)
        assert lease is not None and str(lease.job_id) in ids
        assert payload_of(lease) == Step("last")
        assert queue.complete(lease)
        assert queue.claim(QUEUE) is None
    assert lease.context.tenant_id == TENANT
