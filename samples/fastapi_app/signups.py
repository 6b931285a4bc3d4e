"""The service's table, jobs and (async) handlers."""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import List, Tuple

import peewee

from caravel_lite import JobContext, JobRegistry

WELCOME = "welcome"  # the queue of welcome e-mails
DIGESTS = "digests"  # the queue of weekly digests

logger = logging.getLogger("fastapi_app")
database = peewee.DatabaseProxy()  # the application database
registry = JobRegistry()


class Customer(peewee.Model):
    id = peewee.AutoField()
    email = peewee.CharField(max_length=200, unique=True)
    tenant_id = peewee.CharField(max_length=64)

    class Meta:
        database = database
        table_name = "signup_customer"


@dataclass
class Mailer:
    """Stands in for an e-mail API client: ``send`` is awaited like a network call."""

    sent: List[Tuple[str, str]] = field(default_factory=list)

    async def send(self, to: str, subject: str) -> None:
        await asyncio.sleep(0)  # the request would be in flight here
        self.sent.append((to, subject))
        logger.info("sent %r to %s", subject, to)


mailer = Mailer()


@dataclass(frozen=True)
class SendWelcome:
    customer_id: int
    email: str


@dataclass(frozen=True)
class SendDigest:
    email: str
    week: int


@registry.job("signups.send-welcome.v1", SendWelcome)
async def send_welcome(job: SendWelcome, ctx: JobContext) -> None:
    # Use ctx.tenant_id (set by the trusted caller), never a tenant from the payload.
    await mailer.send(job.email, f"Welcome! ({ctx.tenant_id})")


@registry.job("signups.send-digest.v1", SendDigest)
async def send_digest(job: SendDigest, ctx: JobContext) -> None:
    await mailer.send(job.email, f"Your week {job.week} digest")
