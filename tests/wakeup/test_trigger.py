"""Migrations 0003 and 0004: on PostgreSQL triggers announce rows that become pending
(insert, retry, reclaimed lease, replay) on one channel with "<queue> <due ms>", at
commit and never for a rolled-back insert, a claim or a completion; an INSERT
statement announces each of its queues once, with the earliest due time among its
rows (0004). Elsewhere both are applied as no-ops that create no trigger."""
from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from typing import List

import pytest

from caravel_lite import Dispatch, Failure, check_schema, migrate, open_database
from caravel_lite.clock import floor_ms, now_micros
from caravel_lite.dialect import dialect_of
from caravel_lite.migrator import pending_migrations, runner
from caravel_lite.worker.waiter import CHANNEL
from tests.support import wait_for
from tests.wakeup.helpers import OTHER_QUEUE, QUEUE, Ping, enqueue, make_queue

SENTINEL = "sentinel"


def _triggers(db, backend) -> List[str]:
    if backend == "sqlite":
        sql = "SELECT name FROM sqlite_master WHERE type = 'trigger'"
    elif backend == "postgres":
        sql = ("SELECT tgname FROM pg_trigger WHERE tgrelid = 'caravel_jobs'::regclass "
               "AND NOT tgisinternal")
    else:
        sql = ("SELECT trigger_name FROM information_schema.triggers "
               "WHERE trigger_schema = DATABASE()")
    return sorted(row[0] for row in db.execute_sql(sql).fetchall())


def test_0003_is_applied_everywhere_and_creates_triggers_only_where_notify(new_database,
                                                                          backend):
    db = open_database(new_database())
    with db.connection_context():
        assert "0003_notify_trigger" in migrate(db)
        check_schema(db)
        if dialect_of(db).change_signal == "notify":
            # 0003's two, and 0008's (queue.wait's signal of finished jobs).
            assert _triggers(db, backend) == ["caravel_jobs_notify_finish",
                                              "caravel_jobs_notify_insert",
                                              "caravel_jobs_notify_update"]
        else:
            assert _triggers(db, backend) == []
        # Down and up again (the later ones first; 0004 replaces 0003's insert
        # trigger): reversible on every database.
        applied = [name for (name,) in db.execute_sql(
            "SELECT name FROM caravel_migrations ORDER BY name").fetchall()]
        later = applied[applied.index("0003_notify_trigger"):]
        assert later[:3] == ["0003_notify_trigger", "0004_partial_indexes",
                             "0005_cluster_jobs_by_id"]
        assert runner(db).down("0003_notify_trigger") == later[::-1]
        assert _triggers(db, backend) == []
        assert pending_migrations(db) == later
        assert migrate(db) == later
        assert len(_triggers(db, backend)) == (3 if backend == "postgres" else 0)


def _insert_trigger_is_per_row(db) -> bool:
    (tgtype,) = db.execute_sql(
        "SELECT tgtype FROM pg_trigger WHERE tgrelid = 'caravel_jobs'::regclass "
        "AND tgname = 'caravel_jobs_notify_insert'").fetchone()
    return bool(tgtype & 1)  # TRIGGER_TYPE_ROW


@pytest.mark.change_signal("notify")
def test_0004_makes_the_insert_trigger_per_statement_and_down_restores_0003s(
        new_database, backend):
    db = open_database(new_database())
    with db.connection_context():
        migrate(db)
        assert not _insert_trigger_is_per_row(db)
        applied = [name for (name,) in db.execute_sql(
            "SELECT name FROM caravel_migrations ORDER BY name").fetchall()]
        later = applied[applied.index("0004_partial_indexes"):]  # 0004 and after
        assert runner(db).down("0004_partial_indexes") == later[::-1]
        assert _insert_trigger_is_per_row(db)
        assert _triggers(db, backend) == ["caravel_jobs_notify_insert",
                                          "caravel_jobs_notify_update"]
        assert migrate(db) == later
        assert not _insert_trigger_is_per_row(db)


@pytest.fixture
def listener(db, db_url):
    """A raw psycopg LISTEN on the channel; ``heard(writer)`` returns what was announced
    before a sentinel NOTIFY sent by ``writer`` (notifications of one session arrive in
    order, so no timing guess decides what "nothing announced" means)."""
    import psycopg

    conn = psycopg.connect(db_url, autocommit=True)
    conn.execute(f"LISTEN {CHANNEL}")

    def heard(writer) -> List[str]:
        writer.execute_sql(f"NOTIFY {CHANNEL}, '{SENTINEL}'")
        payloads: List[str] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            for notice in conn.notifies(timeout=0.5):
                if notice.payload == SENTINEL:
                    return payloads
                payloads.append(notice.payload)
        raise AssertionError("the sentinel notification never arrived")
    yield heard
    conn.close()


@pytest.mark.change_signal("notify")
def test_insert_is_announced_with_queue_and_due_time(db, listener):
    queue = make_queue(db)
    before = floor_ms(now_micros(queue.clock))
    job_id = enqueue(queue, 1)
    (payload,) = listener(db)
    name, due = payload.split(" ")
    assert name == QUEUE
    status = queue.status(job_id, queue=QUEUE, tenant_id="tenant-a")
    assert int(due) == floor_ms(now_micros(lambda: status.available_at)) >= before


@pytest.mark.change_signal("notify")
def test_a_delayed_insert_announces_its_future_due_time(db, listener):
    queue = make_queue(db)
    now_ms = floor_ms(now_micros(queue.clock))
    enqueue(queue, 1, delay=60)
    (payload,) = listener(db)
    assert int(payload.split(" ")[1]) >= now_ms + 59_000


@pytest.mark.change_signal("notify")
def test_a_rolled_back_insert_is_not_announced(db, listener):
    queue = make_queue(db)
    with db.atomic() as transaction:
        enqueue(queue, 1)
        transaction.rollback()
    assert listener(db) == []


@pytest.mark.change_signal("notify")
def test_a_duplicate_enqueue_is_not_announced_again(db, listener):
    queue = make_queue(db)
    dispatch = Dispatch(queue=QUEUE, tenant_id="tenant-a", idempotency_key="k")
    queue.enqueue(Ping(1), dispatch)
    assert len(listener(db)) == 1
    assert queue.enqueue(Ping(1), dispatch).already_enqueued
    assert listener(db) == []


@pytest.mark.change_signal("notify")
def test_claim_renew_and_complete_are_silent_retry_and_replay_announce(db, listener):
    queue = make_queue(db, max_attempts=1, retry_delay=timedelta(seconds=30))
    job_id = enqueue(queue, 1)
    assert len(listener(db)) == 1
    lease = queue.claim(QUEUE)
    lease = queue.renew(lease)
    assert listener(db) == []
    assert queue.fail(lease, Failure.HANDLER_FAILED)  # max_attempts=1: dead letter
    assert listener(db) == []
    assert queue.replay(job_id, queue=QUEUE, tenant_id="tenant-a")
    assert [p.split(" ")[0] for p in listener(db)] == [QUEUE]
    lease = queue.claim(QUEUE)
    assert queue.complete(lease)
    assert listener(db) == []
    # max_attempts is frozen on the row at enqueue: a job that may retry.
    retrying = make_queue(db, max_attempts=3, retry_delay=timedelta(seconds=30))
    enqueue(retrying, 2)
    assert len(listener(db)) == 1
    lease = retrying.claim(QUEUE)
    now_ms = floor_ms(now_micros(retrying.clock))
    assert retrying.fail(lease, Failure.HANDLER_FAILED)  # back to pending in 30 s
    (payload,) = listener(db)
    assert int(payload.split(" ")[1]) >= now_ms + 29_000


@pytest.mark.change_signal("notify")
def test_a_reclaimed_expired_lease_is_announced(db, listener):
    queue = make_queue(db, lease_duration=timedelta(seconds=1), max_attempts=3)
    enqueue(queue, 1)
    listener(db)
    assert queue.claim(QUEUE) is not None
    # The lease runs out within a second; then the sweep makes the job pending again.
    wait_for(lambda: queue.reclaim_expired(QUEUE), timeout=10, message="lease expiry")
    assert [p.split(" ")[0] for p in listener(db)] == [QUEUE]


@pytest.mark.change_signal("notify")
def test_a_batch_announces_each_queue_once_with_its_earliest_due_time(db, listener):
    queue = make_queue(db)
    now = datetime.now(timezone.utc)
    items = []
    for n, (name, delay) in enumerate([(QUEUE, 60), (QUEUE, None), (QUEUE, 30),
                                       (OTHER_QUEUE, 90), (OTHER_QUEUE, 45)]):
        not_before = None if delay is None else now + timedelta(seconds=delay)
        items.append((Ping(n), Dispatch(queue=name, tenant_id="tenant-a",
                                        not_before=not_before)))
    queue.enqueue_many(items)
    earliest = dict(db.execute_sql(
        "SELECT queue, MIN(available_at) FROM caravel_jobs GROUP BY queue").fetchall())
    heard = [payload.split(" ") for payload in listener(db)]
    assert sorted((name, int(due)) for name, due in heard) == sorted(earliest.items())
    assert len(heard) == 2
