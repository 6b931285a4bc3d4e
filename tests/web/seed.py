"""A seeded queue for the dashboard tests: jobs in every state, two queues, two
tenants (one of them an HTML injection attempt), dead letters with a failure history
made by a real worker."""
from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Dict, List

import peewee

from caravel_lite import (DatabaseQueue, Dispatch, Failure, JobRegistry, QueueOptions,
                          QueueWorker)
from caravel_lite.testing import ManualClock

EVIL_TENANT = "<script>alert(1)</script>"
TENANT = "tenant-b"
START = datetime(2030, 1, 1, 9, 0, tzinfo=timezone.utc)


class MailRejected(Exception):
    """The failure the failing handler raises (its type name lands in the history)."""


@dataclass(frozen=True)
class Mail:
    n: int
    fail: bool = False
    note: str = ""


def send_mail(job: Mail, ctx) -> None:
    # Seeded jobs (n < 1000) that fail, fail every attempt; history jobs only the first.
    if job.fail and (job.n < 1000 or ctx.attempt == 1):
        raise MailRejected("recipient refused")  # the message is never stored


registry = JobRegistry()
registry.register("mail.send.v1", Mail, send_mail)


@dataclass
class Seeded:
    clock: ManualClock
    queue: DatabaseQueue
    ids: Dict[str, List[uuid.UUID]]  # by role: completed, dead, pending, delayed, leased

    def all_ids(self) -> List[uuid.UUID]:
        return [job_id for ids in self.ids.values() for job_id in ids]


HISTORY_QUEUES = ("webhooks", "billing", "thumbnails")


def seed(db: peewee.Database, start: datetime = START, history: int = 0) -> Seeded:
    """Seed the database; the clock starts at ``start`` and ends about 25 minutes
    later. ``history`` adds that many jobs on three other queues, run over the hour
    that ends there (one in twelve failing once before it succeeds, pickup latencies
    of a fraction of a second to a few seconds), for charts worth looking at."""
    clock = ManualClock(start)
    queue = DatabaseQueue(db, registry, QueueOptions(max_attempts=3), clock=clock)
    worker = QueueWorker(queue)
    ids: Dict[str, List[uuid.UUID]] = {"completed": [], "dead": [], "pending": [],
                                       "delayed": [], "leased": []}

    def enqueue(role: str, mail: Mail, queue_name: str, tenant: str, **extra) -> None:
        result = queue.enqueue(mail, Dispatch(queue=queue_name, tenant_id=tenant, **extra))
        ids[role].append(result.job_id)

    for n in range(3):
        enqueue("completed", Mail(n), "emails", TENANT)
    while worker.run_once("emails"):
        pass
    enqueue("dead", Mail(10, fail=True, note="<b>bold</b>"), "emails", EVIL_TENANT)
    enqueue("dead", Mail(11, fail=True), "reports", TENANT)
    # Three failed attempts each, recorded as a worker records them (with the
    # exception, whose type and raise site go into the failure history).
    for _ in range(3):
        for queue_name in ("emails", "reports"):
            lease = queue.claim(queue_name)
            assert lease is not None
            try:
                send_mail(Mail(10, fail=True), lease.context)
            except MailRejected as exc:
                assert queue.fail(lease, Failure.HANDLER_FAILED, error=exc)
        clock.advance(timedelta(minutes=8))
    for n in range(20, 24):
        enqueue("pending", Mail(n), "reports", TENANT if n % 2 else EVIL_TENANT)
    enqueue("delayed", Mail(30), "emails", TENANT, not_before=start + timedelta(days=2))
    enqueue("leased", Mail(40), "leases", TENANT)
    assert queue.claim("leases") is not None
    clock.advance(timedelta(seconds=5))
    end = clock()
    if history:
        rng = random.Random(17)

        def run_over(first: datetime, count: int, step: timedelta, n0: int) -> None:
            clock.set(first)
            for n in range(n0, n0 + count):
                queue_name = HISTORY_QUEUES[n % 3]
                queue.enqueue(Mail(1000 + n, fail=n % 11 == 5),
                              Dispatch(queue=queue_name, tenant_id=f"tenant-{n % 4}"))
                wait = timedelta(milliseconds=rng.choice((40, 80, 150, 300, 900, 2500)))
                clock.advance(wait)
                while worker.run_once(queue_name):
                    pass
                clock.advance(step - wait)
        # The day before the last hour, at a tenth of the rate, busier at midday.
        hour = end - timedelta(hours=24)
        for h in range(23):
            count = max(1, history // 10 * (1 + (h % 12)) // 6)
            run_over(hour, count, timedelta(hours=1) / count, 100_000 + h * 1000)
            hour += timedelta(hours=1)
        run_over(end - timedelta(hours=1), history, timedelta(hours=1) / history, 0)
        clock.set(end)
    return Seeded(clock, queue, ids)
