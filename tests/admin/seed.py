"""A seeded queue database for the operator tests: two queues, two tenants, a job in
every state (ready, delayed, live lease, expired lease, completed, dead letter) for
each (queue, tenant) pair, made through the public queue API on a manual clock."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Dict, List, Tuple

import peewee

from caravel_lite import (DatabaseQueue, Dispatch, Failure, JobRegistry, JobState,
                          QueueOptions)
from caravel_lite.admin.filters import id_time_ms
from caravel_lite.ids import new_id
from caravel_lite.testing import ManualClock

QUEUES = ("mail", "reports")
TENANTS = ("tenant-a", "tenant-b")
LEASE = timedelta(seconds=30)
START = datetime(2030, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class Mail:
    n: int


@dataclass(frozen=True)
class Report:
    n: int


registry = JobRegistry()
registry.register("test.mail.v1", Mail, lambda job, ctx: None)
registry.register("test.report.v1", Report, lambda job, ctx: None)

CATEGORIES = ("completed", "dead", "live", "expired", "ready", "delayed")


@dataclass
class Seeded:
    clock: ManualClock
    queue: DatabaseQueue
    # (queue, tenant, category) -> job id
    ids: Dict[Tuple[str, str, str], uuid.UUID] = field(default_factory=dict)

    def where(self, **match: str) -> List[uuid.UUID]:
        keys = ("queue", "tenant", "category")
        return [job_id for key, job_id in self.ids.items()
                if all(key[keys.index(k)] == v for k, v in match.items())]

    @property
    def all(self) -> List[uuid.UUID]:
        return list(self.ids.values())


STATE_OF = {"expired": JobState.LEASED, "completed": JobState.COMPLETED,
            "dead": JobState.DEAD_LETTER, "live": JobState.LEASED,
            "ready": JobState.PENDING, "delayed": JobState.PENDING}


def make_queue(db: peewee.Database, clock: ManualClock, **options) -> DatabaseQueue:
    opts = dict(max_attempts=1, lease_duration=LEASE)
    opts.update(options)
    return DatabaseQueue(db, registry, QueueOptions(**opts), clock=clock)


def id_boundary() -> datetime:
    """An instant that every id made so far is older than and every id made from now on
    is not: the start of a millisecond the next ids carry. Ids carry the wall clock's
    millisecond but never go back in time, so after an earlier test in the process froze
    the clock in the future they keep that millisecond and advance by their counter;
    making ids until the millisecond changes (at most 4,096) works in both cases."""
    first = id_time_ms(str(new_id()))
    while True:
        ms = id_time_ms(str(new_id()))
        if ms != first:
            return datetime.fromtimestamp(ms / 1000, timezone.utc)


def seed(db: peewee.Database, start: datetime = START, lease: timedelta = LEASE) -> Seeded:
    """``start``: the seed's clock (for processes that read the system clock, the
    present); ``lease``: the live leases' duration."""
    clock = ManualClock(start)
    queue = make_queue(db, clock, lease_duration=lease)
    s = Seeded(clock, queue)
    n = 0

    def put(queue_name: str, tenant: str, category: str, **dispatch) -> uuid.UUID:
        nonlocal n
        n += 1
        job = Mail(n) if queue_name == "mail" else Report(n)
        job_id = queue.enqueue(job, Dispatch(queue=queue_name, tenant_id=tenant,
                                             **dispatch)).job_id
        s.ids[(queue_name, tenant, category)] = job_id
        return job_id

    short = make_queue(db, clock, lease_duration=timedelta(seconds=1))

    def take(via: DatabaseQueue, queue_name: str, job_id: uuid.UUID):
        clock.advance(timedelta(milliseconds=40))  # a pickup latency of 40 ms
        lease = via.claim(queue_name)
        assert lease is not None and lease.job_id == job_id, "seed claim took another job"
        return lease

    # Every claim below takes the job just enqueued (the only one due); the clock
    # moves 80 ms per pair, so no lease expires before the end.
    for queue_name in QUEUES:
        for tenant in TENANTS:
            lease = take(queue, queue_name, put(queue_name, tenant, "completed"))
            assert queue.complete(lease)
            lease = take(queue, queue_name, put(queue_name, tenant, "dead"))
            assert queue.fail(lease, Failure.HANDLER_FAILED)
            take(queue, queue_name, put(queue_name, tenant, "live"))
            take(short, queue_name, put(queue_name, tenant, "expired"))
    for queue_name in QUEUES:
        for tenant in TENANTS:
            put(queue_name, tenant, "ready")
            put(queue_name, tenant, "delayed", not_before=clock() + timedelta(hours=1))
    clock.advance(timedelta(seconds=2))  # the short leases expire, the others live
    return s
