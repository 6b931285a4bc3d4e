"""The web app. Each request gets a connection (opened before, closed after it), and
an order is saved with its receipt job in one transaction: both or neither."""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import peewee
from flask import Flask, abort, request

from caravel_lite import DatabaseQueue, Dispatch

from flask_app.shop import RECEIPTS, TENANT, Order, Receipt, SendReceipt, database

OUT_OF_STOCK = {"unicorn"}

Reply = Tuple[Dict[str, Any], int]


def create_app(db: peewee.Database, queue: DatabaseQueue) -> Flask:
    """The Flask app over ``db`` (the shop's tables and the queue's) and ``queue``."""
    database.initialize(db)
    app = Flask(__name__)

    @app.before_request
    def connect() -> None:
        db.connect(reuse_if_open=True)

    @app.teardown_request
    def close(exc: Optional[BaseException]) -> None:
        if not db.is_closed():
            db.close()

    @app.post("/orders")
    def place_order() -> Reply:
        body = request.get_json(silent=True) or {}
        item, email = body.get("item"), body.get("email")
        if not isinstance(item, str) or not isinstance(email, str) or "@" not in email:
            abort(400, "item and email are required")
        try:
            # On SQLite, IMMEDIATE takes the write lock at BEGIN, so that a concurrent
            # request cannot make this transaction fail half-way (docs/OUTBOX.md).
            with db.atomic("IMMEDIATE") if _sqlite(db) else db.atomic():
                order = Order.create(item=item, email=email)
                job = queue.enqueue(SendReceipt(order.id),
                                    Dispatch(RECEIPTS, tenant_id=TENANT,
                                             idempotency_key=f"order-{order.id}"))
                if item in OUT_OF_STOCK:  # found out after writing: roll both back
                    raise OutOfStock(item)
        except OutOfStock:
            return {"error": f"{item} is out of stock"}, 409
        return {"order_id": order.id, "job_id": str(job.job_id)}, 201

    @app.get("/orders/<int:order_id>")
    def show_order(order_id: int) -> Reply:
        order = Order.get_or_none(Order.id == order_id)
        if order is None:
            abort(404)
        receipt = Receipt.get_or_none(Receipt.order == order)
        return {"order_id": order.id, "item": order.item,
                "receipt_sent": receipt is not None}, 200

    return app


class OutOfStock(Exception):
    pass


def _sqlite(db: peewee.Database) -> bool:
    return isinstance(db, peewee.SqliteDatabase)

