"""Job types, a registry and factories shared by the scheduler tests (importable by
spawned processes and by the command line as MODULE:ATTR)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, List

import peewee

from caravel_lite import DatabaseQueue, JobRegistry, QueueOptions, QueueScheduler, open_database

QUEUE = "scheduled"
TENANT = "tenant-a"


@dataclass(frozen=True)
class Tick:
    n: int


@dataclass
class Report:
    """Mutable on purpose: the snapshot test changes it after registration."""

    title: str
    recipients: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Blob:
    text: str


def _noop(job: Any, ctx: Any) -> None:
    return None


registry = JobRegistry()
registry.register("scheduled.tick.v1", Tick, _noop)
registry.register("scheduled.report.v1", Report, _noop)
registry.register("scheduled.blob.v1", Blob, _noop)


def make_queue(db: peewee.Database, clock: Any = None, **options: Any) -> DatabaseQueue:
    kwargs = {} if clock is None else {"clock": clock}
    return DatabaseQueue(db, registry, QueueOptions(**options), **kwargs)


def keys(db: peewee.Database) -> List[str]:
    """Idempotency keys of every stored job, sorted."""
    rows = db.execute_sql("SELECT idempotency_key FROM caravel_jobs").fetchall()
    return sorted(row[0] for row in rows)


def job_count(db: peewee.Database) -> int:
    return db.execute_sql("SELECT COUNT(*) FROM caravel_jobs").fetchone()[0]


def payloads(db: peewee.Database) -> List[str]:
    rows = db.execute_sql("SELECT payload FROM caravel_jobs").fetchall()
    return sorted(row[0] for row in rows)


# -- what the command-line tests load as MODULE:ATTR -----------------------------------

def build_scheduler() -> QueueScheduler:
    """A callable returning a scheduler, over CARAVEL_DATABASE_URL (as an app would)."""
    import os
    db = open_database(os.environ["CARAVEL_DATABASE_URL"])
    scheduler = QueueScheduler(make_queue(db), poll_interval=timedelta(milliseconds=200))
    scheduler.every("heartbeat", timedelta(seconds=1), Tick(1), queue=QUEUE, tenant_id=TENANT)
    scheduler.cron("nightly", "0 2 * * *", Tick(2), queue=QUEUE, tenant_id=TENANT,
                   timezone="Europe/Berlin")
    return scheduler


def scheduler_from_env() -> QueueScheduler:
    """A scheduler over SCHEDULER_TEST_URL (a database other than the worker's)."""
    import os
    db = open_database(os.environ["SCHEDULER_TEST_URL"])
    scheduler = QueueScheduler(make_queue(db))
    scheduler.every("heartbeat", timedelta(seconds=1), Tick(1), queue=QUEUE, tenant_id=TENANT)
    return scheduler


not_a_scheduler = registry


def scheduler_with_catch_up() -> QueueScheduler:
    """A schedule whose keys must outlive a two-hour catch-up window."""
    import os
    db = open_database(os.environ["CARAVEL_DATABASE_URL"])
    scheduler = QueueScheduler(make_queue(db))
    scheduler.every("beat", timedelta(seconds=1), Tick(1), queue=QUEUE, tenant_id=TENANT,
                    catch_up=timedelta(minutes=10))
    scheduler.cron("hourly", "0 * * * *", Tick(2), queue=QUEUE, tenant_id=TENANT,
                   catch_up=timedelta(hours=2))
    return scheduler
