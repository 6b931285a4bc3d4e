"""The job and handler of the ctx.transaction() tests, importable by spawned children:
each write goes to an application table in the queue's own database, inside the
block, so the tests can count the effects that committed."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional

import peewee

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, LeaseLost, QueueOptions

QUEUE = "effects"
TENANT = "tenant-a"
TABLE = "test_effects"


@dataclass(frozen=True)
class Write:
    n: int
    # "": commit and return; "after": kill -9 right after the commit; "before": kill -9
    # inside the block, after its write; "raise": raise inside the block.
    crash: str = ""


class Hooks:
    """What a test lets the handler do inside its block (wait, record)."""

    def __init__(self) -> None:
        self.inside: Optional[Callable[[JobContext], None]] = None
        self.lease_lost: List[int] = []


hooks = Hooks()
_databases: Dict[int, peewee.Database] = {}
registry = JobRegistry()


@registry.job("effects.write.v1", Write, queue=QUEUE, max_attempts=3,
              retry_delay=timedelta(milliseconds=1))
def write(job: Write, ctx: JobContext) -> None:
    db = _databases[0]  # Peewee's connections are per thread: any thread may use it
    try:
        with ctx.transaction():
            db.execute_sql(f"INSERT INTO {TABLE} (job_id, attempt, n) VALUES "
                           f"({db.param}, {db.param}, {db.param})",
                           (str(ctx.job_id), ctx.attempt, job.n))
            if hooks.inside is not None:
                hooks.inside(ctx)
            if job.crash == "before":
                os.kill(os.getpid(), signal.SIGKILL)
            if job.crash == "raise":
                raise RuntimeError("inside the block")
    except LeaseLost:
        hooks.lease_lost.append(ctx.attempt)
        raise
    if job.crash == "after":
        os.kill(os.getpid(), signal.SIGKILL)


def make_queue(db: peewee.Database, queue_class: Any = DatabaseQueue,
               **options: Any) -> DatabaseQueue:
    """A queue over ``db``, which the handler also writes through."""
    _databases[0] = db
    return queue_class(db, registry, QueueOptions(**options))


def create_table(db: peewee.Database) -> None:
    db.execute_sql(f"CREATE TABLE IF NOT EXISTS {TABLE} (job_id VARCHAR(36) NOT NULL, "
                   f"attempt INTEGER NOT NULL, n INTEGER NOT NULL)")


def effects(db: peewee.Database) -> List[Any]:
    return [tuple(row) for row in db.execute_sql(
        f"SELECT job_id, attempt, n FROM {TABLE} ORDER BY attempt").fetchall()]


def run_once_in_child(url: str) -> None:
    """A child process: one worker.run_once on the effects queue (lease 1 s)."""
    from caravel_lite import QueueWorker, open_database
    db = open_database(url)
    db.connect()
    queue = make_queue(db, lease_duration=timedelta(seconds=1))
    QueueWorker(queue).run_once(QUEUE)
    db.close()
