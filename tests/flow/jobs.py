"""Job types, registries and queues shared by the flow-control tests."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional

import peewee

from caravel_lite import DatabaseQueue, Dispatch, JobRegistry, Priority, QueueOptions

QUEUE = "flow"


@dataclass(frozen=True)
class Task:
    n: int


@dataclass(frozen=True)
class Export:
    n: int


@dataclass(frozen=True)
class Call:
    n: int


def _noop(job: Any, ctx: Any) -> None:
    return None


def registry(concurrency_limit: Optional[int] = None,
             rate_limit: Optional[tuple] = None) -> JobRegistry:
    """Task (no limits of its own), Export (concurrency_limit), Call (rate_limit)."""
    reg = JobRegistry()
    reg.register("flow.task.v1", Task, _noop)
    reg.register("flow.export.v1", Export, _noop, concurrency_limit=concurrency_limit)
    reg.register("flow.call.v1", Call, _noop, rate_limit=rate_limit)
    return reg


def make_queue(db: peewee.Database, reg: Optional[JobRegistry] = None, clock=None,
               **options: Any) -> DatabaseQueue:
    kwargs = {} if clock is None else {"clock": clock}
    options.setdefault("lease_duration", timedelta(seconds=30))
    return DatabaseQueue(db, reg or registry(), QueueOptions(**options), **kwargs)


def to(tenant: str, key: Optional[str] = None, priority: Priority = Priority.NORMAL,
       queue: str = QUEUE) -> Dispatch:
    return Dispatch(queue=queue, tenant_id=tenant, concurrency_key=key, priority=priority)
