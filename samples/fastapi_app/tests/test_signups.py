"""The FastAPI sample, tested with caravel_lite's pytest fixtures and helpers: the
queue on ``caravel_db``, the application database beside it."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import peewee
import pytest
from fastapi.testclient import TestClient

from caravel_lite import DatabaseQueue, OutboxRelay, QueueOutbox, migrate, open_database
from caravel_lite.testing import InlineQueue, assert_enqueued, assert_not_enqueued, drain
from caravel_lite.testing.plugin import QueueFactory

from fastapi_app.app import create_app
from fastapi_app.signups import (DIGESTS, WELCOME, Customer, SendDigest, SendWelcome,
                                 database, mailer, registry)


@pytest.fixture
def app_db(tmp_path: Path) -> Iterator[peewee.Database]:
    """The application's own database (customers and the outbox)."""
    db = open_database(f"sqlite:///{tmp_path / 'app.sqlite'}")
    with db.connection_context():
        migrate(db)
        database.initialize(db)
        db.create_tables([Customer])
    yield db
    db.close()


@pytest.fixture(autouse=True)
def no_mail_left() -> None:
    mailer.sent.clear()


def client_for(app_db: peewee.Database, queue: DatabaseQueue) -> TestClient:
    return TestClient(create_app(app_db, queue, QueueOutbox(app_db, registry, queue.options,
                                                            clock=queue.clock)))


@pytest.fixture
def queue(caravel_queue_factory: QueueFactory) -> DatabaseQueue:
    return caravel_queue_factory(registry)


def test_a_sign_up_is_welcomed_through_the_outbox(app_db: peewee.Database,
                                                  queue: DatabaseQueue) -> None:
    with client_for(app_db, queue) as client:
        reply = client.post("/signups", json={"email": "ada@example.com", "tenant_id": "t1"})
    assert reply.status_code == 201
    customer_id = reply.json()["customer_id"]
    assert_not_enqueued(queue, WELCOME)  # staged in the app database, not yet relayed

    assert OutboxRelay(app_db, queue).run_once() == 1
    [job] = assert_enqueued(queue, WELCOME, SendWelcome(customer_id, "ada@example.com"),
                            tenant_id="t1", count=1)
    assert str(job.job_id) == reply.json()["outbox_id"]  # the intent's id becomes the job's
    assert drain(queue, WELCOME).completed == 1  # the async def handler, via the worker
    assert mailer.sent == [("ada@example.com", "Welcome! (t1)")]


def test_a_refused_sign_up_stages_nothing(app_db: peewee.Database,
                                          queue: DatabaseQueue) -> None:
    with client_for(app_db, queue) as client:
        assert client.post("/signups", json={"email": "bob@example.com",
                                             "tenant_id": "t1"}).status_code == 201
        again = client.post("/signups", json={"email": "bob@example.com", "tenant_id": "t1"})
    assert again.status_code == 409
    assert OutboxRelay(app_db, queue).run_once() == 1  # only the first sign-up's intent
    assert len(assert_enqueued(queue, WELCOME, SendWelcome)) == 1


def test_a_digest_is_enqueued_from_the_async_endpoint_and_its_status_read(
        app_db: peewee.Database, queue: DatabaseQueue) -> None:
    body = {"email": "c@example.com", "tenant_id": "t2", "week": 7}
    with client_for(app_db, queue) as client:
        first = client.post("/digests", json=body).json()
        again = client.post("/digests", json=body).json()
        assert again == {"job_id": first["job_id"], "already_enqueued": True}
        assert_enqueued(queue, DIGESTS, SendDigest("c@example.com", 7), count=1)
        path = f"/jobs/{DIGESTS}/{first['job_id']}"
        assert client.get(path, params={"tenant_id": "t2"}).json()["state"] == "pending"
        assert client.get(path, params={"tenant_id": "t1"}).status_code == 404
        drain(queue, DIGESTS)
        assert client.get(path, params={"tenant_id": "t2"}).json()["state"] == "completed"
    assert mailer.sent == [("c@example.com", "Your week 7 digest")]


def test_with_an_inline_queue_the_relay_runs_the_welcome_at_once(
        app_db: peewee.Database, caravel_queue_factory: QueueFactory) -> None:
    queue = caravel_queue_factory(registry, inline=True)
    assert isinstance(queue, InlineQueue)
    with client_for(app_db, queue) as client:
        client.post("/signups", json={"email": "d@example.com", "tenant_id": "t3"})
    OutboxRelay(app_db, queue).run_once()
    assert mailer.sent == [("d@example.com", "Welcome! (t3)")]
