"""The Flask sample, tested the way an application tests its jobs: caravel_lite's
pytest fixtures (``caravel_db``, ``caravel_queue_factory``...) and helpers."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Iterator

import peewee
import pytest
from flask.testing import FlaskClient

from caravel_lite import DatabaseQueue, JobContext
from caravel_lite.testing import assert_enqueued, assert_not_enqueued, drain
from caravel_lite.testing.plugin import QueueFactory

from flask_app.app import create_app
from flask_app.shop import (RECEIPTS, TENANT, Order, Receipt, SendReceipt, init_db, registry,
                            send_receipt)

SAMPLES = Path(__file__).resolve().parents[2]


@pytest.fixture
def shop_db(caravel_db: peewee.Database) -> peewee.Database:
    init_db(caravel_db)  # the shop's tables beside caravel_lite's (already migrated)
    return caravel_db


@pytest.fixture
def queue(shop_db: peewee.Database, caravel_queue_factory: QueueFactory) -> DatabaseQueue:
    return caravel_queue_factory(registry)


@pytest.fixture
def client(shop_db: peewee.Database, queue: DatabaseQueue) -> Iterator[FlaskClient]:
    yield create_app(shop_db, queue).test_client()


def test_an_order_and_its_receipt_job_are_saved_together(client: FlaskClient,
                                                          queue: DatabaseQueue) -> None:
    reply = client.post("/orders", json={"item": "teapot", "email": "ada@example.com"})
    assert reply.status_code == 201
    order_id = reply.get_json()["order_id"]
    [job] = assert_enqueued(queue, RECEIPTS, SendReceipt(order_id), count=1)
    assert job.dispatch.idempotency_key == f"order-{order_id}"
    assert client.get(f"/orders/{order_id}").get_json()["receipt_sent"] is False

    assert drain(queue, RECEIPTS).completed == 1
    assert client.get(f"/orders/{order_id}").get_json()["receipt_sent"] is True


def test_a_failed_request_leaves_neither_order_nor_job(client: FlaskClient,
                                                       queue: DatabaseQueue) -> None:
    reply = client.post("/orders", json={"item": "unicorn", "email": "bob@example.com"})
    assert reply.status_code == 409
    assert Order.select().count() == 0
    assert_not_enqueued(queue, RECEIPTS)


def test_the_receipt_handler_is_repeat_safe(client: FlaskClient, queue: DatabaseQueue) -> None:
    order_id = client.post("/orders", json={"item": "cup", "email": "c@example.com"}
                           ).get_json()["order_id"]
    drain(queue, RECEIPTS)
    # A second delivery of the same job (at least once) records no second receipt.
    send_receipt(SendReceipt(order_id), JobContext(uuid.uuid4(), RECEIPTS, TENANT, 2))
    assert Receipt.select().count() == 1


def test_in_inline_mode_the_receipt_is_sent_when_the_request_commits(
        shop_db: peewee.Database, caravel_queue_factory: QueueFactory) -> None:
    queue = caravel_queue_factory(registry, inline=True)
    client = create_app(shop_db, queue).test_client()
    order_id = client.post("/orders", json={"item": "kettle", "email": "d@example.com"}
                           ).get_json()["order_id"]
    assert client.get(f"/orders/{order_id}").get_json()["receipt_sent"] is True
    assert client.post("/orders", json={"item": "unicorn", "email": "e@example.com"}
                       ).status_code == 409
    assert Receipt.select().count() == 1


@pytest.mark.slow
def test_the_command_line_worker_sends_the_receipt(shop_db: peewee.Database,
                                                   caravel_db_url: str) -> None:
    # The worker process runs on the real clock, so this queue does too.
    client = create_app(shop_db, DatabaseQueue(shop_db, registry)).test_client()
    order_id = client.post("/orders", json={"item": "mug", "email": "f@example.com"}
                           ).get_json()["order_id"]
    env = dict(os.environ, SHOP_DATABASE_URL=caravel_db_url,
               PYTHONPATH=os.pathsep.join(filter(None, [str(SAMPLES),
                                                        os.environ.get("PYTHONPATH")])))
    worker = subprocess.Popen(
        [sys.executable, "-m", "caravel_lite", "worker", "flask_app.worker:queue_from_env",
         "--queue", RECEIPTS, "--poll-interval", "0.2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not client.get(f"/orders/{order_id}").get_json()["receipt_sent"]:
            assert worker.poll() is None, worker.communicate()[1]
            assert time.monotonic() < deadline, "the worker did not send the receipt"
            time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
