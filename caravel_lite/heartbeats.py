"""Worker heartbeats (migration 0009): which workers are alive and what each runs.

Each running :meth:`QueueWorker.run <caravel_lite.QueueWorker.run>` keeps one row in
``caravel_workers``: its id, host, pid, queues, concurrency, library version, when it
started, when it was last seen and how many jobs it runs. It writes the row when it
starts, refreshes it every :data:`BEAT` seconds (one UPDATE per worker, never per job)
and deletes it when it stops cleanly. A row not refreshed for :data:`LOST_BEATS` beats
is shown as lost (a worker killed, or cut off from the database); lost rows older than
:data:`FORGET_AFTER` are deleted by the next worker that starts and by
:meth:`Heartbeats.read`.

Which jobs a worker runs needs no write per job: the lease token of every claim a
worker makes begins with the worker's id (16 hex digits, then 16 random ones), so a
leased row names the worker holding it and, with ``claimed_at``, since when.
"""
from __future__ import annotations

import json
import os
import secrets
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, List, Optional, Sequence, Tuple

import peewee

from caravel_lite.clock import from_ms
from caravel_lite.schema import JOBS_TABLE, WORKERS_TABLE
from caravel_lite.values import JobState

__all__ = ["Heartbeats", "WorkerInfo", "RunningJob", "new_worker_id", "library_version",
           "BEAT", "LOST_BEATS", "FORGET_AFTER"]

BEAT = 5.0
LOST_BEATS = 3
FORGET_AFTER = 24 * 3600.0
WORKER_ID_LENGTH = 16
# At most this many running jobs are listed per queue (QueueAdmin.workers).
JOBS_PER_QUEUE = 1000
LEASED = JobState.LEASED.value


def new_worker_id() -> str:
    """A fresh worker id: 16 random hex digits (the first half of its lease tokens)."""
    return secrets.token_hex(WORKER_ID_LENGTH // 2)


def library_version() -> str:
    try:
        from importlib.metadata import version
        return version("caravel_lite")[:32]
    except Exception:  # not installed (a source checkout)
        return "unknown"


@dataclass(frozen=True)
class RunningJob:
    """A leased job as the workers view shows it: who holds it, since when."""

    job_id: uuid.UUID
    queue_name: str
    tenant_id: str
    wire_name: str
    claimed_at: Optional[datetime]
    lease_expires_at: Optional[datetime]


@dataclass(frozen=True)
class WorkerInfo:
    """One worker's heartbeat row, and the jobs it holds leases on. ``lost``: not
    refreshed for ``LOST_BEATS`` beats (it is gone or cut off; its leases expire)."""

    worker_id: str
    host: str
    pid: int
    queues: Tuple[str, ...]
    concurrency: int
    version: str
    started_at: datetime
    last_seen_at: datetime
    running: int
    lost: bool
    jobs: Tuple[RunningJob, ...] = ()


class Heartbeats:
    """The heartbeat statements of one database."""

    def __init__(self, db: peewee.Database) -> None:
        p = db.param
        t = WORKERS_TABLE
        self.db = db
        self._insert = (f"INSERT INTO {t} (worker_id, host, pid, queues, concurrency, version, "
                        f"started_at, last_seen_at, running) VALUES ({', '.join([p] * 9)})")
        # running always changes or last_seen_at does: a beat counts as a changed row
        # (MariaDB reports changed rows).
        self._beat = f"UPDATE {t} SET last_seen_at = {p}, running = {p} WHERE worker_id = {p}"
        self._delete = f"DELETE FROM {t} WHERE worker_id = {p}"
        self._forget = f"DELETE FROM {t} WHERE last_seen_at < {p}"
        self._all = (f"SELECT worker_id, host, pid, queues, concurrency, version, started_at, "
                     f"last_seen_at, running FROM {t} ORDER BY started_at, worker_id")
        # The leased rows of one queue, through the lease index (its predicate word for
        # word, where it is partial).
        self._leased = (f"SELECT id, queue, tenant_id, wire_name, claimed_at, "
                        f"lease_expires_at, lease_token FROM {JOBS_TABLE} "
                        f"WHERE queue = {p} AND state = '{LEASED}' LIMIT {JOBS_PER_QUEUE}")

    def holder(self, job_id: str) -> Optional[str]:
        """The id of the worker with a heartbeat row whose claim leased ``job_id``, or
        None (not leased, or leased by a claim outside ``QueueWorker.run``)."""
        p = self.db.param
        row = self.db.execute_sql(
            f"SELECT w.worker_id FROM {JOBS_TABLE} j JOIN {WORKERS_TABLE} w "
            f"ON w.worker_id = SUBSTR(j.lease_token, 1, {WORKER_ID_LENGTH}) "
            f"WHERE j.id = {p} AND j.state = '{LEASED}'", (job_id,)).fetchone()
        return str(row[0]) if row is not None else None

    def register(self, worker_id: str, queues: Sequence[str], concurrency: int,
                 now_ms: int) -> None:
        """Write the row of a worker that starts (and forget long-lost ones)."""
        self.db.execute_sql(self._forget, (now_ms - int(FORGET_AFTER * 1000),))
        self.db.execute_sql(self._insert, (
            worker_id, socket.gethostname()[:255], os.getpid(), json.dumps(list(queues)),
            concurrency, library_version(), now_ms, now_ms, 0))

    def beat(self, worker_id: str, running: int, now_ms: int) -> bool:
        """Refresh the row; False when it is gone (deleted as lost: the caller writes it
        again)."""
        return int(self.db.execute_sql(self._beat, (now_ms, running, worker_id)).rowcount) == 1

    def remove(self, worker_id: str) -> None:
        self.db.execute_sql(self._delete, (worker_id,))

    def read(self, now_ms: int) -> Tuple[WorkerInfo, ...]:
        """Every worker's row, oldest first, with the jobs each holds; rows lost for
        longer than FORGET_AFTER are deleted first."""
        self.db.execute_sql(self._forget, (now_ms - int(FORGET_AFTER * 1000),))
        rows = list(self.db.execute_sql(self._all).fetchall())
        queues = sorted({name for row in rows for name in json.loads(row[3])})
        held: Dict[str, List[RunningJob]] = {}
        for name in queues:
            for job in self.db.execute_sql(self._leased, (name,)).fetchall():
                token = job[6] or ""
                held.setdefault(token[:WORKER_ID_LENGTH], []).append(RunningJob(
                    uuid.UUID(job[0]), job[1], job[2], job[3], _maybe_ms(job[4]),
                    _maybe_ms(job[5])))
        lost_ms = int(BEAT * LOST_BEATS * 1000)
        return tuple(WorkerInfo(
            worker_id=row[0], host=row[1], pid=int(row[2]), queues=tuple(json.loads(row[3])),
            concurrency=int(row[4]), version=row[5], started_at=from_ms(int(row[6])),
            last_seen_at=from_ms(int(row[7])), running=int(row[8]),
            lost=now_ms - int(row[7]) > lost_ms,
            jobs=tuple(sorted(held.get(row[0], ()), key=lambda j: str(j.job_id))))
            for row in rows)


def _maybe_ms(value: Any) -> Optional[datetime]:
    return from_ms(int(value)) if value is not None else None
