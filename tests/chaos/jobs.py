"""The jobs of a fault-injection run and the table their handlers record runs in.

Every run of a handler inserts a row into ``chaos_runs`` when it starts (job id, job
number, attempt, pid, what the seeded plan asks of it, start time) and sets its end
(time, outcome, whether ``ctx.cancelled`` was set) when it ends, whichever way. The
writes go through a connection of their own to the same database, never through the
worker's proxy (``CHAOS_RESULTS_URL``), so a fault injected between the worker and
its database never loses a record. Times are wall-clock microseconds, taken before the
write: the start as the handler begins, the end as its work ends.

Outcomes: ``returned``, ``raised`` (RuntimeError), ``system_exit``,
``keyboard_interrupt``, ``cancelled`` (stopped on ``ctx.cancelled`` / task
cancellation and raised), ``uncancelled`` (a hanging handler nobody cancelled within
``HANG_CAP``: it raises). A row without an end is a run whose process ended under it.
The table is created by the harness, never by the library's migrations.
"""
from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import peewee

from caravel_lite import JobContext, JobRegistry
from caravel_lite.dialect import open_database
from tests.chaos import plan
from tests.chaos.plan import Behaviour

QUEUE = "chaos"
TENANT = "tenant-c"
# Every LIMITED_EVERY-th job carries the concurrency key LIMITED_KEY, at most
# KEY_LIMIT of them leased at once (QueueOptions(concurrency_limit=...), issue 27).
# One job in ten: the key's two slots pass about four jobs a second (a slow or hung
# run holds one for 3-5 s), so one in five (a hundred-odd keyed jobs) left the drain
# more keyed jobs than its timeout lets two slots run, and runs failed "unfinished"
# with nothing wrong but the arithmetic (seed 252227 on PostgreSQL).
LIMITED_KEY = "chaos-key"
KEY_LIMIT = 2
LIMITED_EVERY = 10


def limited(n: int) -> bool:
    return n % LIMITED_EVERY == 0
RUNS = "chaos_runs"
# How often a working handler looks at ctx.cancelled: part of the overlap tolerance.
POLL = 0.02
# A hanging handler raises after this long if nothing cancelled it (a worker that
# never enforces the deadline); recorded as "uncancelled".
HANG_CAP = 30.0


@dataclass(frozen=True)
class SyncWork:
    n: int


@dataclass(frozen=True)
class AsyncWork:
    n: int


registry = JobRegistry()
_state: Dict[str, object] = {}


def configure(results_url: str, seed: int, lease_seconds: float,
              note: Optional[Callable[..., None]] = None,
              behaviours: str = plan.BEHAVIOURS) -> None:
    """Where runs are recorded, the plan's seed, the lease a slow handler outlasts,
    and ``note(*words)``, which logs a handler's return or raise right before it
    happens (the worker process's log: a write that takes microseconds, where the
    database record's end time is taken before a statement), and the weights of the
    behaviours (:data:`tests.chaos.plan.BEHAVIOURS`)."""
    _state.update(url=results_url, seed=seed, lease=lease_seconds, note=note,
                  behaviours=behaviours)


def _configured() -> None:
    if "url" not in _state:
        configure(os.environ["CHAOS_RESULTS_URL"], int(os.environ["CHAOS_SEED"]),
                  float(os.environ["CHAOS_LEASE"]))


def results_database() -> peewee.Database:
    _configured()
    if "db" not in _state:
        _state["db"] = open_database(str(_state["url"]))
    db = _state["db"]
    assert isinstance(db, peewee.Database)
    return db


def now_us() -> int:
    return time.time_ns() // 1000


class _Run:
    """One handler run's row."""

    def __init__(self, n: int, ctx: JobContext) -> None:
        _configured()
        self.ctx = ctx
        self.started = now_us()
        self.behaviour = plan.behaviour(int(str(_state["seed"])), n, ctx.attempt,
                                        str(_state.get("behaviours", plan.BEHAVIOURS)))
        self.work = plan.work_seconds(int(str(_state["seed"])), n, ctx.attempt)
        self.slow = 1.5 * float(str(_state["lease"]))
        self.run_id = str(uuid.uuid4())
        db = results_database()
        p = db.param
        db.execute_sql(f"INSERT INTO {RUNS} (run_id, job_id, n, attempt, pid, behaviour, "
                       f"started_us) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p})",
                       (self.run_id, str(ctx.job_id), n, ctx.attempt, os.getpid(),
                        self.behaviour.value, self.started))

    def end(self, outcome: str) -> None:
        ended = now_us()
        db = results_database()
        p = db.param
        db.execute_sql(f"UPDATE {RUNS} SET ended_us = {p}, outcome = {p}, cancelled = {p} "
                       f"WHERE run_id = {p}",
                       (ended, outcome, int(self.ctx.cancelled.is_set()), self.run_id))
        note = _state.get("note")
        if callable(note):
            note("end", self.ctx.job_id, self.ctx.attempt, outcome, now_us())


def _raise_planned(run: _Run) -> None:
    if run.behaviour is Behaviour.RAISE:
        run.end("raised")
        raise RuntimeError("planned failure")
    if run.behaviour is Behaviour.SYSTEM_EXIT:
        run.end("system_exit")
        raise SystemExit(3)
    if run.behaviour is Behaviour.KEYBOARD_INTERRUPT:
        run.end("keyboard_interrupt")
        raise KeyboardInterrupt


@registry.job("chaos.sync.v1", SyncWork)
def run_sync(job: SyncWork, ctx: JobContext) -> None:
    run = _Run(job.n, ctx)
    _raise_planned(run)
    if run.behaviour is Behaviour.RETURN:
        time.sleep(run.work)  # short work finishes even when asked to stop
        run.end("returned")
        return
    limit = run.slow if run.behaviour is Behaviour.SLOW else HANG_CAP
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if ctx.cancelled.wait(POLL):
            run.end("cancelled")
            ctx.raise_if_cancelled()
    if run.behaviour is Behaviour.HANG:
        run.end("uncancelled")
        raise RuntimeError("hung handler never cancelled")
    run.end("returned")


@registry.job("chaos.async.v1", AsyncWork)
async def run_async(job: AsyncWork, ctx: JobContext) -> None:
    # The record writes block the event loop for one short statement each: simpler
    # than a hand-off, and a cancellation cannot cut them in half.
    run = _Run(job.n, ctx)
    _raise_planned(run)
    try:
        if run.behaviour is Behaviour.RETURN:
            await asyncio.sleep(run.work)
        else:
            limit = run.slow if run.behaviour is Behaviour.SLOW else HANG_CAP
            deadline = time.monotonic() + limit
            while time.monotonic() < deadline:
                await asyncio.sleep(POLL)
                if ctx.cancelled.is_set():
                    run.end("cancelled")
                    ctx.raise_if_cancelled()
            if run.behaviour is Behaviour.HANG:
                run.end("uncancelled")
                raise RuntimeError("hung handler never cancelled")
    except asyncio.CancelledError:
        run.end("cancelled")
        raise
    run.end("returned")


def drop_table(db: peewee.Database) -> None:
    db.execute_sql(f"DROP TABLE IF EXISTS {RUNS}")


def create_table(db: peewee.Database) -> None:
    drop_table(db)
    db.execute_sql(f"CREATE TABLE {RUNS} (run_id VARCHAR(36) PRIMARY KEY, "
                   "job_id VARCHAR(36) NOT NULL, n INTEGER NOT NULL, attempt INTEGER NOT NULL, "
                   "pid INTEGER NOT NULL, behaviour VARCHAR(24) NOT NULL, "
                   "started_us BIGINT NOT NULL, ended_us BIGINT NULL, "
                   "outcome VARCHAR(24) NULL, cancelled INTEGER NULL)")
