"""A large, realistic jobs table for the operator benchmarks (bench.operator_queries)
and the operator EXPLAIN tests.

Rows are written straight into the migrated tables in bulk (COPY on PostgreSQL,
multi-row INSERTs elsewhere): a week of history across five queues of very different
sizes (50% .. 1%) and twenty tenants, mostly completed, with 3% dead letters; half of
the newest 1% not finished yet (ready, delayed, live and expired leases) and a small
old ready backlog; a failure history for every dead letter and for the completed jobs
that were retried. Ids follow the library's layout (creation
millisecond first), so listing by id is listing by creation time, as in production.
"""
from __future__ import annotations

import random
import uuid
from typing import Any, List, Sequence, Tuple

import peewee

from caravel_lite.dialect import dialect_of
from caravel_lite.schema import FAILURES_TABLE, JOBS_TABLE

DAY_MS = 86_400_000
# (queue name, share of the jobs)
QUEUES = (("emails", 0.50), ("reports", 0.30), ("webhooks", 0.15), ("billing", 0.04),
          ("rare", 0.01))
TENANTS = tuple(f"tenant-{i:02d}" for i in range(20))
JOB_COLUMNS = ("id", "queue", "tenant_id", "idempotency_key", "dedup_key", "wire_name",
               "payload", "priority", "available_at", "max_attempts", "state",
               "enqueued_at", "attempts", "lease_token", "lease_expires_at", "claimed_at",
               "renewals", "last_failure", "replay_count", "updated_at", "finished_at")
FAILURE_COLUMNS = ("job_id", "seq", "queue", "failed_at", "attempt", "replays", "category",
                   "error_type", "site", "description")
CHUNK = 1000


def _id(ms: int, rng: random.Random) -> str:
    value = ((ms << 80) | (0x7 << 76) | (rng.getrandbits(12) << 64) | (0b10 << 62)
             | rng.getrandbits(62))
    return str(uuid.UUID(int=value))


def _queue(rng: random.Random) -> str:
    x = rng.random()
    for name, share in QUEUES:
        if x < share:
            return name
        x -= share
    return QUEUES[0][0]


def rows(total: int, now_ms: int, seed: int = 7) -> Tuple[List[Tuple], List[Tuple]]:
    """(jobs, failures) rows for ``total`` jobs enqueued over the week before now."""
    rng = random.Random(seed)
    jobs: List[Tuple] = []
    failures: List[Tuple] = []
    start = now_ms - 7 * DAY_MS
    step = (7 * DAY_MS) / total
    for i in range(total):
        enqueued = int(start + i * step)
        queue = _queue(rng)
        tenant = TENANTS[min(int(rng.expovariate(0.25)), len(TENANTS) - 1)]
        priority = rng.choice((1, 2, 2, 2, 3))
        x = rng.random()
        available, attempts, token, expires, claimed = enqueued, 1, None, None, None
        last_failure, finished, state = None, None, "completed"
        job_id = _id(enqueued, rng)
        if i >= total - total // 100 and x < 0.5:  # the newest 1%: half not finished yet
            if x < 0.35:
                state, attempts = "pending", 0
            elif x < 0.45:
                state, attempts, available = "pending", 0, now_ms + rng.randint(1, DAY_MS)
            else:
                state, token = "leased", uuid.uuid4().hex
                claimed = now_ms - rng.randint(0, 60_000)
                expires = claimed + (300_000 if x < 0.49 else -1000 - rng.randint(0, 10_000))
        elif x < 0.002:  # an old backlog that nobody drains
            state, attempts = "pending", 0
        elif x < 0.03:
            state, attempts, last_failure = "dead_letter", 3, "handler_failed"
        latency = int(rng.expovariate(1 / 200.0))
        if state in ("completed", "dead_letter"):
            claimed = available + latency
            finished = min(claimed + int(rng.expovariate(1 / 500.0)), now_ms)
            if state == "completed" and x > 0.97:
                attempts = 2
        for attempt in range(1, attempts + 1):
            if state == "dead_letter" or (state == "completed" and attempt < attempts):
                failures.append((job_id, attempt, queue, (claimed or enqueued) + attempt * 5000,
                                 attempt, 0, "handler_failed", "smtplib.SMTPRecipientsRefused",
                                 "app.mail:send_receipt:42", None))
        jobs.append((job_id, queue, tenant, None, None, "bench.work.v1", '{"n":%d}' % i,
                     priority, available, 3, state, enqueued, attempts, token, expires,
                     claimed, 0, last_failure, 0, finished or claimed or enqueued, finished))
    return jobs, failures


def _insert(db: peewee.Database, table: str, columns: Sequence[str],
            values: Sequence[Sequence[Any]]) -> None:
    marks = "(" + ", ".join([db.param] * len(columns)) + ")"

    def insert_many(n: int) -> str:
        return f"INSERT INTO {table} ({', '.join(columns)}) VALUES " + ", ".join([marks] * n)
    dialect_of(db).insert_rows(db, table, columns, values, insert_many, CHUNK)


def load(db: peewee.Database, total: int, now_ms: int) -> Tuple[int, int]:
    """Fill an empty migrated database; returns (jobs, failure records) written."""
    jobs, failures = rows(total, now_ms)
    for start in range(0, len(jobs), 50_000):
        with db.atomic():
            _insert(db, JOBS_TABLE, JOB_COLUMNS, jobs[start:start + 50_000])
    for start in range(0, len(failures), 50_000):
        with db.atomic():
            _insert(db, FAILURES_TABLE, FAILURE_COLUMNS, failures[start:start + 50_000])
    return len(jobs), len(failures)
