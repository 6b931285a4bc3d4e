"""Job types, a registry and small helpers shared by the contract tests."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, List, Optional

import peewee

from caravel_lite import DatabaseQueue, Dispatch, JobRegistry, Priority, QueueOptions

QUEUE = "contract"
TENANT = "tenant-a"


@dataclass(frozen=True)
class Ping:
    n: int


@dataclass(frozen=True)
class Blob:
    text: str


@dataclass(frozen=True)
class Other:
    n: int


@dataclass(frozen=True)
class Nested:
    value: Any


def _noop(job: Any, ctx: Any) -> None:
    return None


registry = JobRegistry()
registry.register("contract.ping.v1", Ping, _noop)
registry.register("contract.blob.v1", Blob, _noop)
registry.register("contract.other.v1", Other, _noop)
registry.register("contract.nested.v1", Nested, _noop)


def make_queue(db: peewee.Database, clock=None, **options: Any) -> DatabaseQueue:
    kwargs = {} if clock is None else {"clock": clock}
    return DatabaseQueue(db, registry, QueueOptions(**options), **kwargs)


def dispatch(key: Optional[str] = None, *, queue: str = QUEUE, tenant: str = TENANT,
             not_before: Optional[datetime] = None,
             priority: Priority = Priority.NORMAL) -> Dispatch:
    return Dispatch(queue=queue, tenant_id=tenant, idempotency_key=key,
                    not_before=not_before, priority=priority)


def row_count(db: peewee.Database, table: str = "caravel_jobs") -> int:
    return db.execute_sql(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def row(db: peewee.Database, job_id: uuid.UUID) -> dict:
    """The raw stored row of one job (for what the public API does not show)."""
    cursor = db.execute_sql("SELECT * FROM caravel_jobs WHERE id = " + db.param,
                            (str(job_id),))
    names = [d[0] for d in cursor.description]
    values = cursor.fetchone()
    assert values is not None, f"no row for {job_id}"
    return dict(zip(names, values))


def ms(instant: datetime) -> int:
    """Epoch milliseconds of an aware datetime that falls on a whole millisecond."""
    delta = instant - datetime(1970, 1, 1, tzinfo=timezone.utc)
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    assert micros % 1000 == 0, instant
    return micros // 1000


def nested_list(levels: int) -> List[Any]:
    """A list nested ``levels`` deep: nested_list(1) == [0]."""
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value
