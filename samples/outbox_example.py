#!/usr/bin/env python3
"""The transactional outbox, end to end, with the application and the queue in two
separate SQLite databases (in a temporary directory that is removed afterwards).

    python samples/outbox_example.py

1. A signup whose business transaction fails: the customer row and the job intent are
   rolled back together.
2. A signup that commits: the customer row and the intent commit together. The queue
   database is not touched yet.
3. The same request retried: the existing intent is returned (already_staged=True).
4. The relay moves the committed intent into the queue, under the intent's id.
5. A worker claims the job and runs its handler with the tenant stored by the trusted
   caller (ctx.tenant_id), never one read from the payload.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import peewee

from caravel_lite import (DatabaseQueue, Dispatch, JobContext, JobRegistry, OutboxRelay,
                          QueueOutbox, QueueWorker, StageResult, migrate, open_database)

registry = JobRegistry()


@dataclass(frozen=True)
class SendWelcomeEmail:
    customer_id: int


@registry.job("customers.welcome-email.v1", SendWelcomeEmail)
def send_welcome_email(job: SendWelcomeEmail, ctx: JobContext) -> None:
    # A real handler must be repeat-safe: delivery is at least once.
    print(f"  handler: welcome email for customer {job.customer_id} "
          f"(tenant {ctx.tenant_id}, attempt {ctx.attempt})")


def customer_model(db: peewee.Database) -> Any:  # a model class bound to db
    class Customer(peewee.Model):
        email = peewee.CharField()
        tenant_id = peewee.CharField()

        class Meta:
            database = db
            table_name = "customer"
    return Customer


def sign_up(app_db: peewee.Database, outbox: QueueOutbox, Customer: Any, email: str,
            tenant: str, request_id: str, fail: bool = False) -> StageResult:
    """One unit of work: the business row and the job intent in one transaction."""
    # SQLite: take the write lock up front, so the transaction cannot fail half-way
    # because another writer got in between its first read and its first write.
    with app_db.atomic("IMMEDIATE"):
        customer = Customer.create(email=email, tenant_id=tenant)
        staged = outbox.stage(SendWelcomeEmail(customer.id),
                              Dispatch("emails", tenant_id=tenant, idempotency_key=request_id))
        if fail:
            raise RuntimeError("payment declined")
    return staged


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="caravel-outbox-") as folder:
        app_db = open_database("sqlite:///" + os.path.join(folder, "app.db"))
        queue_db = open_database("sqlite:///" + os.path.join(folder, "queue.db"))
        try:
            run(app_db, queue_db)
        finally:
            app_db.close()
            queue_db.close()


def run(app_db: peewee.Database, queue_db: peewee.Database) -> None:
    # Schemas are applied deliberately, never on startup: the outbox table in the
    # application database, the jobs table in the queue database.
    migrate(app_db)
    migrate(queue_db)
    Customer = customer_model(app_db)
    app_db.create_tables([Customer])

    outbox = QueueOutbox(app_db, registry)
    queue = DatabaseQueue(queue_db, registry)
    relay = OutboxRelay(app_db, queue)

    print("1. a signup whose transaction fails")
    try:
        sign_up(app_db, outbox, Customer, "ada@example.com", "acme", "req-1", fail=True)
    except RuntimeError as exc:
        print(f"  rolled back ({exc}): customers={Customer.select().count()}, "
              f"intents={outbox.status().pending}")

    print("2. a signup that commits")
    staged = sign_up(app_db, outbox, Customer, "ada@example.com", "acme", "req-2")
    print(f"  committed: customers={Customer.select().count()}, "
          f"intents={outbox.status().pending}, already_staged={staged.already_staged}")
    print(f"  jobs in the queue before the relay: {queue.counts('emails').ready}")

    print("3. the same request retried")
    customer = Customer.get(Customer.email == "ada@example.com")
    with app_db.atomic("IMMEDIATE"):
        again = outbox.stage(SendWelcomeEmail(customer.id),
                             Dispatch("emails", tenant_id="acme", idempotency_key="req-2"))
    print(f"  same intent: {again.outbox_id == staged.outbox_id}, "
          f"already_staged={again.already_staged}")

    print("4. the relay")
    marked = relay.run_once(batch_size=100)
    status = outbox.status()
    print(f"  relay marked {marked}; outbox pending={status.pending}, "
          f"dispatched={status.dispatched}, set_aside={status.set_aside}")
    print(f"  a second pass marks {relay.run_once()}")
    job = queue.status(staged.outbox_id, queue="emails", tenant_id="acme")
    print(f"  found the job under the outbox id: {job is not None}; "
          f"state={job.state.value if job is not None else None}")

    print("5. the worker")
    QueueWorker(queue).run_once("emails")
    job = queue.status(staged.outbox_id, queue="emails", tenant_id="acme")
    assert job is not None
    print(f"  job state={job.state.value}")


if __name__ == "__main__":
    main()
