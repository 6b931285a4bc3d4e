"""OutboxRelay: committed intents become jobs, once each, whatever fails or races.

Runs with the application and the queue in the same database and in two databases."""
from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta

import peewee
import pytest

from caravel_lite import (CaravelError, DatabaseQueue, Dispatch, InvalidField, JobState,
                          OutboxRelay, Priority, QueueOptions, QueueOutbox, StageResult,
                          migrate)
from caravel_lite.codec import decode
from caravel_lite.dialect import open_database
from caravel_lite.testing import ManualClock
from tests.databases import SERVER_URLS
from tests.outbox.conftest import invoice_model
from tests.outbox.jobs import INVOICE, RAN, SendInvoice, build_registry
from tests.support import wait_for


@dataclass
class Setup:
    outbox: QueueOutbox
    queue: DatabaseQueue
    relay: OutboxRelay
    clock: ManualClock


def setup(dbs, registry=None, queue_options=None) -> Setup:
    registry = registry or build_registry()
    clock = ManualClock()
    outbox = QueueOutbox(dbs.app, registry, QueueOptions(max_attempts=5), clock=clock)
    queue = DatabaseQueue(dbs.queue, registry, queue_options, clock=clock)
    return Setup(outbox, queue, OutboxRelay(dbs.app, queue, clock=clock), clock)


def stage(s: Setup, number: int, key=None, tenant="tenant-a", **dispatch) -> StageResult:
    with s.outbox.db.atomic():
        invoice_model(s.outbox.db).create(number=number)
        return s.outbox.stage(SendInvoice(number), Dispatch("billing", tenant, key, **dispatch))


def dispatched(dbs) -> dict:
    rows = dbs.app.execute_sql("SELECT id, job_id FROM caravel_outbox "
                               "WHERE dispatched_at IS NOT NULL").fetchall()
    return dict(rows)


def test_rollback_discards_both_commit_relays_and_runs_with_the_trusted_tenant(dbs):
    s = setup(dbs)
    with pytest.raises(RuntimeError):
        with dbs.app.atomic():
            invoice_model(dbs.app).create(number=1)
            s.outbox.stage(SendInvoice(1), Dispatch("billing", "tenant-a", "inv-1"))
            raise RuntimeError("business rule failed")
    assert dbs.invoices() == 0 and dbs.intents() == 0
    assert s.relay.run_once() == 0

    due = s.clock() + timedelta(hours=1)
    staged = stage(s, 2, "inv-2", tenant="Tenant-B ", not_before=due, priority=Priority.HIGH)
    assert dbs.jobs() == []  # nothing reaches the queue before the relay runs
    assert s.relay.run_once(batch_size=1) == 1
    assert dbs.jobs() == [str(staged.outbox_id)]
    assert dispatched(dbs) == {str(staged.outbox_id): str(staged.outbox_id)}
    status = s.queue.status(staged.outbox_id, "billing", "Tenant-B ")
    assert (status.state, status.priority, status.max_attempts, status.available_at) == (
        JobState.PENDING, Priority.HIGH, 5, due)
    assert s.queue.claim("billing") is None  # not due yet
    s.clock.advance(timedelta(hours=1))
    lease = s.queue.claim("billing")
    assert lease.job_id == staged.outbox_id
    assert lease.context.tenant_id == "Tenant-B "
    RAN.clear()
    definition = s.queue.registry.for_name(lease.wire_name)
    definition.handler(decode(definition.job_type, lease.payload), lease.context)
    assert RAN == [(2, "Tenant-B ")]
    assert s.queue.complete(lease)
    # Staging the same key again, after dispatch, returns the same intent.
    assert stage(s, 2, "inv-2", tenant="Tenant-B ", not_before=due,
                 priority=Priority.HIGH) == StageResult(staged.outbox_id, True)
    assert s.relay.run_once() == 0
    counts = s.outbox.status()
    assert (counts.pending, counts.dispatched, counts.set_aside) == (0, 1, 0)


def test_batch_size_and_transactions_are_checked(dbs):
    s = setup(dbs)
    for bad in (0, 1001, True, 1.5):
        with pytest.raises(InvalidField) as raised:
            s.relay.run_once(batch_size=bad)
        assert raised.value.field == "batch_size"
    stage(s, 1)
    with dbs.app.atomic():
        with pytest.raises(CaravelError):
            s.relay.run_once()
    assert dispatched(dbs) == {} and dbs.jobs() == []


def test_an_unreachable_queue_fails_the_pass_and_the_next_pass_delivers(backend, dbs,
                                                                       new_database):
    s = setup(dbs)
    first, second = stage(s, 1), stage(s, 2, "inv-2")
    # A queue database that worked when the relay was built, then disappeared.
    url = new_database()
    lost = open_database(url)
    with lost.connection_context():
        migrate(lost)
    broken = DatabaseQueue(lost, s.queue.registry, clock=s.clock)
    name = url.rsplit("/", 1)[1]
    if backend == "sqlite":
        path = url[len("sqlite:///"):]
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        os.mkdir(path)  # nothing can open it as a database now
    else:
        admin = open_database(SERVER_URLS[backend])
        with admin.connection_context():
            force = " WITH (FORCE)" if backend == "postgres" else ""
            admin.execute_sql(f"DROP DATABASE {name}{force}")
    with pytest.raises(peewee.DatabaseError):
        OutboxRelay(dbs.app, broken, clock=s.clock).run_once()
    lost.close()
    if backend == "sqlite":
        shutil.rmtree(path)
    assert dispatched(dbs) == {}
    assert s.outbox.status().pending == 2
    assert s.relay.run_once() == 2
    assert sorted(dbs.jobs()) == sorted([str(first.outbox_id), str(second.outbox_id)])


def test_a_crash_between_enqueue_and_mark_is_repaired_without_a_second_job(dbs):
    s = setup(dbs)
    with_key, without_key = stage(s, 1, "inv-1"), stage(s, 2)

    class CrashingRelay(OutboxRelay):
        def _mark_dispatched(self, intent, job_id):
            raise ConnectionError("process died before recording the dispatch")

    with pytest.raises(ConnectionError):
        CrashingRelay(dbs.app, s.queue, clock=s.clock).run_once()
    assert dbs.jobs() == [str(with_key.outbox_id)]  # enqueued, not recorded
    assert dispatched(dbs) == {}
    assert s.relay.run_once() == 2
    expected = sorted([str(with_key.outbox_id), str(without_key.outbox_id)])
    assert sorted(dbs.jobs()) == expected
    assert sorted(dispatched(dbs).values()) == expected


def test_four_relays_at_once_converge_on_one_job_per_intent(dbs):
    s = setup(dbs)
    staged = [stage(s, 1, "inv-1"), stage(s, 2), stage(s, 3, "inv-3")]
    barrier = threading.Barrier(4)
    marked: list = []
    errors: list = []

    def relay() -> None:
        app_db, queue_db = dbs.open_app(), dbs.open_queue()
        queue = DatabaseQueue(queue_db, s.queue.registry, clock=s.clock)
        try:
            barrier.wait(10)
            marked.append(OutboxRelay(app_db, queue, clock=s.clock).run_once())
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            app_db.close()
            queue_db.close()

    threads = [threading.Thread(target=relay) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert sum(marked) == 3 and len(marked) == 4
    assert sorted(dbs.jobs()) == sorted(str(r.outbox_id) for r in staged)


def test_poisoned_intents_are_set_aside_without_blocking_and_can_be_retried(dbs, caplog):
    registry = build_registry()
    s = setup(dbs, registry)
    oldest = s.clock()
    s.clock.advance(timedelta(seconds=1))
    # Direct in the queue: the key "inv-c" with content the intent below disagrees with.
    direct = s.queue.enqueue(SendInvoice(99), Dispatch("billing", "tenant-a", "inv-c"))
    good_1 = stage(s, 1)
    conflicting = stage(s, 3, "inv-c")
    good_2 = stage(s, 2, "inv-2")
    # Hand-written rows at the head of the outbox: an unregistered wire name and a
    # payload that does not decode.
    unknown_id, corrupt_id = str(uuid.uuid4()), str(uuid.uuid4())
    insert = ("INSERT INTO caravel_outbox (id, queue, tenant_id, wire_name, payload, "
              "priority, available_at, max_attempts, staged_at) VALUES "
              f"({', '.join([dbs.app.param] * 9)})")
    ms = int(oldest.timestamp() * 1000)
    dbs.app.execute_sql(insert, (unknown_id, "billing", "tenant-a", "billing.refund.v1",
                                 '{"refund_id":1}', 2, ms, 3, ms))
    dbs.app.execute_sql(insert, (corrupt_id, "billing", "tenant-a", INVOICE,
                                 '{"invoice_id":"SECRET-PAYLOAD"', 2, ms, 3, ms))
    with caplog.at_level(logging.WARNING, logger="caravel_lite"):
        assert s.relay.run_once(batch_size=2) == 0  # only the two poisoned ones read
        assert s.relay.run_once(batch_size=10) == 2
    assert sorted(dbs.jobs()) == sorted([str(good_1.outbox_id), str(good_2.outbox_id),
                                         str(direct.job_id)])
    assert set(dispatched(dbs)) == {str(good_1.outbox_id), str(good_2.outbox_id)}
    counts = s.outbox.status()
    assert (counts.pending, counts.dispatched, counts.set_aside) == (0, 2, 3)
    assert counts.set_aside_reasons == {"idempotency_conflict": 1, "invalid_payload": 1,
                                        "unknown_job_type": 1}
    assert {str(i.outbox_id) for i in s.relay.set_aside()} == {
        unknown_id, corrupt_id, str(conflicting.outbox_id)}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3 and unknown_id in " ".join(warnings)
    assert not any("SECRET" in w or "refund_id" in w for w in warnings)
    assert s.relay.run_once() == 0  # set aside stays aside until someone retries it

    # The fix: register the missing type with the relay's queue, repair the payload.
    @dataclass(frozen=True)
    class Refund:
        refund_id: int
    registry.register("billing.refund.v1", Refund, lambda job, ctx: None)
    dbs.app.execute_sql(f"UPDATE caravel_outbox SET payload = {dbs.app.param} "
                        f"WHERE id = {dbs.app.param}", ('{"invoice_id":5}', corrupt_id))
    assert s.relay.retry_set_aside(uuid.UUID(unknown_id))
    assert s.outbox.retry_set_aside(corrupt_id)
    assert not s.relay.retry_set_aside(good_1.outbox_id)  # not set aside: no change
    assert s.relay.run_once() == 2
    assert set(dispatched(dbs)) >= {unknown_id, corrupt_id}
    assert unknown_id in dbs.jobs() and corrupt_id in dbs.jobs()
    counts = s.outbox.status()
    assert (counts.pending, counts.dispatched, counts.set_aside) == (0, 4, 1)


def test_a_payload_over_the_queues_current_limit_is_set_aside(dbs):
    s = setup(dbs, queue_options=QueueOptions(max_payload_bytes=30))
    small = stage(s, 1)
    with dbs.app.atomic():
        large = s.outbox.stage(SendInvoice(2, "x" * 40), Dispatch("billing", "tenant-a"))
    assert s.relay.run_once() == 1
    assert dbs.jobs() == [str(small.outbox_id)]
    assert s.outbox.status().set_aside_reasons == {"payload_too_large": 1}
    assert [i.outbox_id for i in s.outbox.set_aside()] == [large.outbox_id]


def test_an_intent_committed_late_is_still_relayed(backend, dbs):
    """A transaction that staged first but commits last must not be skipped by a
    relay that already moved past its staged_at."""
    s = setup(dbs)
    # Keys never used before: on MariaDB a just-deleted row with the same unique key
    # (an earlier test's, not yet purged) makes an insert take gap locks that would
    # make the two transactions wait on each other.
    late_key, early_key = f"late-{uuid.uuid4()}", f"early-{uuid.uuid4()}"
    late_db = dbs.open_app()
    late_outbox = QueueOutbox(late_db, s.outbox.registry, clock=s.clock)
    late_tx = late_db.atomic()
    late_tx.__enter__()
    try:
        if backend != "sqlite":
            late = late_outbox.stage(SendInvoice(1), Dispatch("billing", "tenant-a", late_key))
        s.clock.advance(timedelta(seconds=5))
        early = stage(s, 2, early_key)
        assert s.relay.run_once() == 1  # the uncommitted intent is invisible
        assert set(dispatched(dbs)) == {str(early.outbox_id)}
        if backend == "sqlite":
            # SQLite lets one writer in at a time: the late transaction writes only now
            # (with the earlier staged_at it would have had), after the early intent
            # was committed and relayed.
            s.clock.advance(timedelta(seconds=-5))
            late = late_outbox.stage(SendInvoice(1), Dispatch("billing", "tenant-a", late_key))
        assert s.outbox.status().pending == 0  # still uncommitted, so not visible
    finally:
        late_tx.__exit__(None, None, None)  # commit
        late_db.close()
    staged_at = dict(dbs.app.execute_sql("SELECT id, staged_at FROM caravel_outbox").fetchall())
    assert staged_at[str(late.outbox_id)] < staged_at[str(early.outbox_id)]
    assert s.relay.run_once() == 1
    assert set(dispatched(dbs)) == {str(early.outbox_id), str(late.outbox_id)}


def test_run_relays_until_stopped(dbs):
    s = setup(dbs)
    stop = threading.Event()
    errors: list = []

    def loop() -> None:
        try:
            s.relay.run(stop, poll_interval=0.02)
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            dbs.app.close()  # this thread's connections only
            dbs.queue.close()

    # The relay thread opens its own connections (peewee connections are per thread).
    thread = threading.Thread(target=loop)
    thread.start()
    try:
        staged = stage(s, 1, "inv-1")
        wait_for(lambda: dispatched(dbs), message="the running relay to dispatch")
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive() and not errors
    assert dbs.jobs() == [str(staged.outbox_id)]
