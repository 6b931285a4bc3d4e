"""The web app. Every database call is awaited on caravel_lite's own threads
(``aenqueue``, ``astatus``, ``atransaction``), so no endpoint blocks the event loop."""
from __future__ import annotations

import uuid
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict

import peewee
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel

from caravel_lite import DatabaseQueue, Dispatch, QueueOutbox, StageResult

from fastapi_app.signups import DIGESTS, WELCOME, Customer, SendDigest, SendWelcome, database


class SignUp(BaseModel):
    email: str
    tenant_id: str


class Digest(BaseModel):
    email: str
    tenant_id: str
    week: int


def create_app(app_db: peewee.Database, queue: DatabaseQueue,
               outbox: QueueOutbox) -> FastAPI:
    """``app_db`` holds the customers and the outbox; ``queue`` is on its own database.
    ``outbox`` stages into ``app_db`` with the options of ``queue``."""
    database.initialize(app_db)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        # Close caravel_lite's threads and their connections on shutdown.
        await outbox.aclose()
        await queue.aclose()

    app = FastAPI(lifespan=lifespan)

    @app.post("/signups", status_code=201)
    async def sign_up(body: SignUp) -> Dict[str, Any]:
        def work() -> Dict[str, Any]:
            # One transaction on the application database: the customer and the
            # intent to welcome them commit (or roll back) together.
            try:
                customer = Customer.create(email=body.email, tenant_id=body.tenant_id)
            except peewee.IntegrityError:  # raising rolls the transaction back
                raise HTTPException(409, "this e-mail address has already signed up")
            staged: StageResult = outbox.stage(
                SendWelcome(customer.id, customer.email),
                Dispatch(WELCOME, tenant_id=body.tenant_id,
                         idempotency_key=f"welcome-{customer.id}"))
            return {"customer_id": customer.id, "outbox_id": str(staged.outbox_id)}
        return await outbox.atransaction(work)

    @app.post("/digests", status_code=202)
    async def send_digest(body: Digest) -> Dict[str, Any]:
        # No business row goes with it: enqueue straight into the queue database.
        result = await queue.aenqueue(
            SendDigest(body.email, body.week),
            Dispatch(DIGESTS, tenant_id=body.tenant_id,
                     idempotency_key=f"digest-{body.email}-{body.week}"))
        return {"job_id": str(result.job_id), "already_enqueued": result.already_enqueued}

    @app.get("/jobs/{queue_name}/{job_id}")
    async def job_status(queue_name: str, job_id: uuid.UUID,
                         tenant_id: str) -> Dict[str, Any]:
        status = await queue.astatus(job_id, queue_name, tenant_id)
        if status is None:
            raise HTTPException(404, "no such job for this tenant")
        return {"state": status.state.value, "attempts": status.attempts}

    return app
