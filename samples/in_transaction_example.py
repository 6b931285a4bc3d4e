#!/usr/bin/env python3
"""Enqueue in the application's own transaction, with the queue in the application's
database (one SQLite file in a temporary directory that is removed afterwards).

    python samples/in_transaction_example.py

When the jobs table lives in the same database as the business tables, no outbox is
needed: ``queue.enqueue`` called inside ``db.atomic()`` joins that transaction. Commit
makes the order and its job visible together; rollback leaves neither.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import peewee

from caravel_lite import (DatabaseQueue, Dispatch, EnqueueResult, JobContext, JobRegistry,
                          QueueWorker, migrate, open_database)

registry = JobRegistry()


@dataclass(frozen=True)
class ShipOrder:
    order_id: int


@registry.job("orders.ship.v1", ShipOrder)
def ship_order(job: ShipOrder, ctx: JobContext) -> None:
    print(f"  handler: shipping order {job.order_id} (tenant {ctx.tenant_id})")


def order_model(db: peewee.Database) -> Any:  # a model class bound to db
    class Order(peewee.Model):
        item = peewee.CharField()

        class Meta:
            database = db
            table_name = "shop_order"
    return Order


def place_order(db: peewee.Database, queue: DatabaseQueue, Order: Any, item: str,
                fail: bool = False) -> EnqueueResult:
    # SQLite: IMMEDIATE takes the write lock at BEGIN (see docs/OUTBOX.md).
    with db.atomic("IMMEDIATE"):
        order = Order.create(item=item)
        result = queue.enqueue(ShipOrder(order.id), Dispatch("shipping", tenant_id="acme",
                                                             idempotency_key=f"order-{item}"))
        if fail:
            raise RuntimeError("out of stock")
    return result


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="caravel-in-tx-") as folder:
        db = open_database("sqlite:///" + os.path.join(folder, "shop.db"))
        try:
            run(db)
        finally:
            db.close()


def jobs(queue: DatabaseQueue) -> int:
    counts = queue.counts("shipping")
    return counts.ready + counts.delayed + counts.active_leases + counts.completed


def run(db: peewee.Database) -> None:
    migrate(db)
    Order = order_model(db)
    db.create_tables([Order])
    queue = DatabaseQueue(db, registry)

    print("1. an order whose transaction fails")
    try:
        place_order(db, queue, Order, "teapot", fail=True)
    except RuntimeError as exc:
        print(f"  rolled back ({exc}): orders={Order.select().count()}, jobs={jobs(queue)}")

    print("2. an order that commits")
    result = place_order(db, queue, Order, "kettle")
    print(f"  committed: orders={Order.select().count()}, jobs={jobs(queue)}, "
          f"already_enqueued={result.already_enqueued}")

    print("3. the worker")
    QueueWorker(queue).run_once("shipping")
    status = queue.status(result.job_id, queue="shipping", tenant_id="acme")
    assert status is not None
    print(f"  job state={status.state.value}")


if __name__ == "__main__":
    main()
