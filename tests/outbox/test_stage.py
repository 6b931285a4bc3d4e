"""QueueOutbox.stage: inside the caller's transaction, validated like enqueue,
idempotent per (queue, tenant, key)."""
from __future__ import annotations

import threading
import uuid
from datetime import datetime

import peewee
import pytest

from caravel_lite import (Dispatch, InvalidField, OutsideTransaction, QueueIdempotencyConflict,
                          QueueOptions, QueueOutbox, StageResult, UnknownJobType)
from tests.outbox.conftest import INVOICE_TABLE, invoice_model
from tests.outbox.jobs import SendInvoice, SendReceipt, build_registry
from tests.support import wait_for


def intents(db) -> int:
    return db.execute_sql("SELECT COUNT(*) FROM caravel_outbox").fetchone()[0]


def invoices(db) -> int:
    return db.execute_sql(f"SELECT COUNT(*) FROM {INVOICE_TABLE}").fetchone()[0]


def test_outside_a_transaction_stage_raises_and_writes_nothing(app):
    outbox = QueueOutbox(app, build_registry())
    with pytest.raises(OutsideTransaction):
        outbox.stage(SendInvoice(1), Dispatch("billing", "tenant-a", "k1"))
    assert intents(app) == 0


@pytest.mark.parametrize("job, dispatch, field", [
    (SendInvoice(1), Dispatch("Billing", "tenant-a"), "queue"),
    (SendInvoice(1), Dispatch("billing", "   "), "tenant_id"),
    (SendInvoice(1), Dispatch("billing", "tenant-a", ""), "idempotency_key"),
    (SendInvoice(1), Dispatch("billing", "tenant-a", not_before=datetime(2030, 1, 1)),
     "not_before"),
    (SendInvoice(1, "x" * 200), Dispatch("billing", "tenant-a"), "payload"),
])
def test_bad_input_names_the_field_and_leaves_the_transaction_usable(app, job, dispatch,
                                                                     field):
    outbox = QueueOutbox(app, build_registry(), QueueOptions(max_payload_bytes=100))
    Invoice = invoice_model(app)
    with app.atomic():
        Invoice.create(number=1)
        with pytest.raises(InvalidField) as raised:
            outbox.stage(job, dispatch)
        assert raised.value.field == field
        Invoice.create(number=2)  # the caller's transaction still works
    assert intents(app) == 0
    assert invoices(app) == 2


def test_unregistered_job_type_is_refused(app):
    outbox = QueueOutbox(app, build_registry())
    with app.atomic():
        with pytest.raises(UnknownJobType):
            outbox.stage(SendReceipt(1), Dispatch("billing", "tenant-a"))
    assert intents(app) == 0


def test_duplicate_in_one_transaction_and_across_transactions(app):
    outbox = QueueOutbox(app, build_registry())
    dispatch = Dispatch("billing", "tenant-a", "order-7")
    with app.atomic():
        first = outbox.stage(SendInvoice(7), dispatch)
        again = outbox.stage(SendInvoice(7), dispatch)
        invoice_model(app).create(number=7)  # the duplicate did not poison the transaction
    assert isinstance(first, StageResult) and isinstance(first.outbox_id, uuid.UUID)
    assert first.already_staged is False
    assert again == StageResult(first.outbox_id, True)
    with app.atomic():
        later = outbox.stage(SendInvoice(7), dispatch)
    assert later == StageResult(first.outbox_id, True)
    # Same key under another tenant or queue is another intent.
    with app.atomic():
        other_tenant = outbox.stage(SendInvoice(7), Dispatch("billing", "tenant-A", "order-7"))
        other_queue = outbox.stage(SendInvoice(7), Dispatch("billing-2", "tenant-a", "order-7"))
    assert not other_tenant.already_staged and not other_queue.already_staged
    assert len({first.outbox_id, other_tenant.outbox_id, other_queue.outbox_id}) == 3
    assert intents(app) == 3 and invoices(app) == 1


def test_changed_payload_or_wire_name_conflicts_and_keeps_the_transaction(app):
    registry = build_registry()
    registry.register("billing.receipt.v1", SendReceipt, lambda job, ctx: None)
    outbox = QueueOutbox(app, registry)
    dispatch = Dispatch("billing", "tenant-a", "order-8")
    with app.atomic():
        staged = outbox.stage(SendInvoice(8), dispatch)
    with app.atomic():
        with pytest.raises(QueueIdempotencyConflict) as changed:
            outbox.stage(SendInvoice(8, "changed"), dispatch)
        with pytest.raises(QueueIdempotencyConflict):
            outbox.stage(SendReceipt(8), dispatch)
        invoice_model(app).create(number=8)
    assert changed.value.existing_id == staged.outbox_id
    assert intents(app) == 1 and invoices(app) == 1


def test_no_key_means_a_new_intent_every_call(app):
    outbox = QueueOutbox(app, build_registry())
    with app.atomic():
        results = [outbox.stage(SendInvoice(9), Dispatch("billing", "tenant-a"))
                   for _ in range(3)]
    assert len({r.outbox_id for r in results}) == 3
    assert not any(r.already_staged for r in results)
    assert intents(app) == 3


def _blocked_sessions(db: peewee.Database, backend: str) -> int:
    """Sessions on this database waiting for a lock (0 where it cannot be observed)."""
    if backend == "postgres":
        sql = ("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = current_database() "
               "AND wait_event_type = 'Lock'")
    elif backend == "mysql":
        sql = ("SELECT COUNT(*) FROM information_schema.innodb_trx t "
               "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id "
               "WHERE t.trx_state = 'LOCK WAIT' AND p.db = DATABASE()")
    else:
        return 0
    return db.execute_sql(sql).fetchone()[0]


def test_simultaneous_staging_of_one_key_leaves_one_intent(app, backend, connect):
    """The second transaction waits on the unique index; whatever it then gets, an
    already-staged receipt or an error after which it retries the whole transaction,
    there is exactly one intent."""
    registry = build_registry()
    dispatch = Dispatch("billing", "tenant-a", "race-1")
    first_staged = threading.Event()
    second_started = threading.Event()
    results: dict = {}
    errors: list = []

    def first() -> None:
        db = connect()
        outbox = QueueOutbox(db, registry)
        try:
            with db.atomic():
                results["first"] = outbox.stage(SendInvoice(1), dispatch)
                first_staged.set()
                second_started.wait(10)
                if backend != "sqlite":  # SQLite cannot show the wait; it queues on the lock
                    wait_for(lambda: _blocked_sessions(app, backend) >= 1,
                             message="the second staging to wait on the first")
        except Exception as exc:  # reported to the main thread
            errors.append(exc)
        finally:
            first_staged.set()
            db.close()

    def second() -> None:
        db = connect()
        outbox = QueueOutbox(db, registry)
        try:
            first_staged.wait(10)
            for attempt in range(5):  # what a caller does: retry the whole transaction
                try:
                    with db.atomic():
                        second_started.set()
                        results["second"] = outbox.stage(SendInvoice(1), dispatch)
                    results["second_attempts"] = attempt + 1
                    return
                except (peewee.IntegrityError, peewee.OperationalError):
                    continue
        except Exception as exc:
            errors.append(exc)
        finally:
            second_started.set()
            db.close()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert results["first"].already_staged is False
    assert results["second"] == StageResult(results["first"].outbox_id, True)
    assert intents(app) == 1
