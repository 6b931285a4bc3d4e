"""Migration 0009 (issue 25) in a rolling deploy: jobs written by the code before it
(a waiting job, a leased one, a dead letter with its failure history) are claimed, run
and reported correctly after it; the previous release's statements (enqueue, claim,
retry, the failure history's insert) still work against the new schema, whose new
columns are all nullable; 0009 can be reverted and applied again."""
from __future__ import annotations

from datetime import timedelta

import pytest

from caravel_lite import (Failure, JobState, QueueAdmin, QueueWorker, check_schema, migrate)
from caravel_lite.dialect import open_database
from caravel_lite.migrator import runner
from caravel_lite.schema import PAUSED_TABLE, WORKERS_TABLE
from caravel_lite.testing import ManualClock
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue

BEFORE = "0008_job_options_and_results"  # the previous release's last
# The previous release's statements, frozen: fail()'s retry, and the failure
# history's insert (without the message and trace columns).
OLD_RETRY = ("UPDATE caravel_jobs SET state = 'pending', available_at = {p}, "
             "last_failure = {p}, lease_token = NULL, lease_expires_at = NULL, "
             "updated_at = {p} WHERE id = {p} AND state = 'leased' AND lease_token = {p} "
             "AND lease_expires_at > {p}")
OLD_HISTORY = ("INSERT INTO caravel_failures (job_id, seq, queue, failed_at, attempt, "
               "replays, category, error_type, site, description) SELECT id, {p}, queue, "
               "{p}, {p}, replay_count, {p}, {p}, {p}, {p} FROM caravel_jobs WHERE id = {p}")


@pytest.fixture
def fresh(new_database):
    db = open_database(new_database())
    db.connect()
    yield db
    db.close()


def _old_failure(db, queue, lease, now_ms, *, dead):
    """fail() as the previous release ran it: the UPDATE and a history row."""
    p = db.param
    if dead:
        sql = (f"UPDATE caravel_jobs SET state = 'dead_letter', last_failure = {p}, "
               f"lease_token = NULL, lease_expires_at = NULL, finished_at = {p}, "
               f"updated_at = {p} WHERE id = {p} AND lease_token = {p}")
        params = ("handler_failed", now_ms, now_ms, str(lease.job_id), lease._token)
    else:
        sql = OLD_RETRY.format(p=p)
        params = (now_ms + 1000, "handler_failed", now_ms, str(lease.job_id), lease._token,
                  now_ms)
    assert db.execute_sql(sql, params).rowcount == 1
    db.execute_sql(OLD_HISTORY.format(p=p), (1, now_ms, lease.attempt, "handler_failed",
                                             "ValueError", "app:send:40", None,
                                             str(lease.job_id)))


def test_rows_of_the_previous_release_run_and_report_correctly_after_0009(fresh, backend):
    assert runner(fresh).up(BEFORE)[-1] == BEFORE
    clock = ManualClock()
    old = make_queue(fresh, clock=clock, max_attempts=2,
                     lease_duration=timedelta(seconds=30))
    waiting = old.enqueue(Ping(1), dispatch("k-1")).job_id
    leased_id = old.enqueue(Ping(2), dispatch()).job_id
    dead_id = old.enqueue(Ping(3), dispatch()).job_id
    now_ms = int(clock().timestamp() * 1000)
    first = old.claim(QUEUE)
    assert first.job_id == waiting
    _old_failure(fresh, old, first, now_ms, dead=False)  # waiting again, retry due in 1 s
    leased = old.claim(QUEUE)
    assert leased.job_id == leased_id
    doomed = old.claim(QUEUE)
    _old_failure(fresh, old, doomed, now_ms, dead=True)

    applied = migrate(fresh)  # 0009 and the migrations after it: the new release
    assert applied[0] == "0009_control"
    check_schema(fresh)
    assert set(fresh.get_tables()) >= {PAUSED_TABLE, WORKERS_TABLE}

    new = make_queue(fresh, clock=clock, max_attempts=2, lease_duration=timedelta(seconds=30))
    admin = QueueAdmin(fresh, clock=clock)
    # The lease taken before the migration is still owned and completes.
    assert new.complete(leased)
    # The retried job is claimed and run by the new worker, its old history intact.
    clock.advance(timedelta(seconds=2))
    assert QueueWorker(new).run_once(QUEUE)
    detail = admin.job(waiting)
    assert detail.state is JobState.COMPLETED and detail.attempts == 2
    (record,) = detail.failures
    assert (record.error_type, record.message, record.trace) == ("ValueError", None, None)
    # The dead letter is listed with its category and replays.
    assert admin.job(dead_id).last_failure is Failure.HANDLER_FAILED
    assert admin.replay(dead_id)
    assert new.cancel(dead_id, QUEUE, TENANT)
    assert admin.job(dead_id).state is JobState.CANCELLED
    assert new.enqueue(Ping(1), dispatch("k-1")).already_enqueued

    # The previous release's statements against the new schema (a rolling deploy).
    again = old.enqueue(Ping(4), dispatch()).job_id
    lease = old.claim(QUEUE)
    assert lease.job_id == again
    _old_failure(fresh, old, lease, int(clock().timestamp() * 1000), dead=False)
    assert admin.job(again).state is JobState.PENDING
    assert len(admin.job(again).failures) == 1

    assert runner(fresh).down("0009_control")[-1] == "0009_control"
    assert PAUSED_TABLE not in fresh.get_tables()
    assert old.claim(QUEUE) is None  # the retry is not due yet: the old claim runs
    assert migrate(fresh)[0] == "0009_control"
