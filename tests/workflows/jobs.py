"""Job types, a registry and helpers shared by the workflow tests (chains, batches,
debouncing, uniqueness for a period)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, List, Optional, Set

import peewee

from caravel_lite import DatabaseQueue, Discard, Dispatch, JobRegistry, QueueOptions

QUEUE = "flows"
TENANT = "tenant-w"


@dataclass(frozen=True)
class Step:
    name: str


@dataclass(frozen=True)
class Flaky:
    """Fails (Discard: dead-lettered at once) while ``FAILING`` names it."""
    name: str


# What the handlers ran, in order (one test process: reset by each test that reads it).
RAN: List[str] = []
FAILING: Set[str] = set()


def _record(job: Any, ctx: Any) -> None:
    RAN.append(job.name)


def _flaky(job: Flaky, ctx: Any) -> None:
    if job.name in FAILING:
        raise Discard()
    RAN.append(job.name)


@dataclass(frozen=True)
class InTransaction:
    """Completes in its handler's own transaction (ctx.transaction())."""
    name: str


def _in_transaction(job: InTransaction, ctx: Any) -> None:
    with ctx.transaction():
        RAN.append(job.name)


registry = JobRegistry()
registry.register("workflows.step.v1", Step, _record)
registry.register("workflows.flaky.v1", Flaky, _flaky)
registry.register("workflows.in-transaction.v1", InTransaction, _in_transaction)


def make_queue(db: peewee.Database, clock: Any = None, **options: Any) -> DatabaseQueue:
    kwargs = {} if clock is None else {"clock": clock}
    return DatabaseQueue(db, registry, QueueOptions(**options), **kwargs)


def to(**fields: Any) -> Dispatch:
    fields.setdefault("queue", QUEUE)
    fields.setdefault("tenant_id", TENANT)
    return Dispatch(**fields)


def state_of(db: peewee.Database, job_id: uuid.UUID) -> Optional[str]:
    row = db.execute_sql(f"SELECT state FROM caravel_jobs WHERE id = {db.param}",
                         (str(job_id),)).fetchone()
    return None if row is None else str(row[0])


def count(db: peewee.Database, where: str = "1 = 1", params: Any = ()) -> int:
    return int(db.execute_sql(f"SELECT COUNT(*) FROM caravel_jobs WHERE {where}",
                              params).fetchone()[0])


def payload_of(lease: Any) -> Step:
    from caravel_lite import codec
    return codec.decode(Step, lease.payload)


def workflow_rows(db: peewee.Database) -> int:
    return int(db.execute_sql("SELECT COUNT(*) FROM caravel_workflows").fetchone()[0]
               + db.execute_sql("SELECT COUNT(*) FROM caravel_workflow_jobs").fetchone()[0])


def codec_name(lease: Any) -> str:
    """The ``name`` field of a claimed Step or Flaky."""
    import json
    return str(json.loads(lease.payload)["name"])
