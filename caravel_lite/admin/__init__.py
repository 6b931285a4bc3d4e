"""QueueAdmin: the operator's view of a queue database, across every tenant.

The application's :class:`~caravel_lite.DatabaseQueue` answers for one tenant at a
time (``status``, ``replay``); an operator, a command line or a dashboard needs to see
and act on all of them. That is this object, and only this object: it sees every
tenant's jobs, so only people trusted with all of them should run it. Payloads are
never read unless asked for (``include_payload=True``). Every listing and figure is
read through an index (see :mod:`caravel_lite.admin.filters` and
:mod:`caravel_lite.admin.stats`).
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any, Optional, Sequence, Tuple, Union

import peewee

from caravel_lite import validation
from caravel_lite.admin.filters import (Instant, JobFilter, check_cursor, page_limit,
                                        queue_names, read_newest)
from caravel_lite.admin.stats import StatsReader
from caravel_lite.admin.values import (FailureRecord, JobDetail, JobPage, JobSummary,
                                       MinuteCount, PruneProgress, QueueStats,
                                       QueueSummary, TenantCounts)
from caravel_lite.clock import Clock, floor_ms, from_ms, now_micros, system_clock
from caravel_lite.schema import FAILURES_TABLE, JOBS_TABLE
from caravel_lite.values import Failure, JobState, Priority

__all__ = ["QueueAdmin", "JobSummary", "JobPage", "JobDetail", "FailureRecord",
           "QueueSummary", "TenantCounts", "MinuteCount", "QueueStats", "PruneProgress"]

SUMMARY_COLUMNS = ("id, queue, tenant_id, wire_name, state, priority, attempts, max_attempts, "
                   "available_at, enqueued_at, finished_at, lease_expires_at, last_failure, "
                   "replay_count")
DETAIL_COLUMNS = SUMMARY_COLUMNS + ", idempotency_key, claimed_at, updated_at, renewals"
DEFAULT_WINDOW = timedelta(hours=1)


def _maybe_ms(value: Any) -> Optional[datetime]:
    return from_ms(int(value)) if value is not None else None


def _summary_fields(row: Sequence[Any]) -> dict:
    return dict(
        job_id=uuid.UUID(row[0]), queue_name=row[1], tenant_id=row[2], wire_name=row[3],
        state=JobState(row[4]), priority=Priority(row[5]), attempts=row[6],
        max_attempts=row[7], available_at=from_ms(int(row[8])),
        enqueued_at=from_ms(int(row[9])), finished_at=_maybe_ms(row[10]),
        lease_expires_at=_maybe_ms(row[11]),
        last_failure=Failure(row[12]) if row[12] else None, replay_count=row[13])


class QueueAdmin:
    """Operator views and actions over every tenant of the queue database ``db``
    (migrated with :func:`caravel_lite.migrate`). ``clock`` is the source of "now"
    (the system UTC clock by default), as for :class:`~caravel_lite.DatabaseQueue`.
    """

    def __init__(self, db: peewee.Database, *, clock: Optional[Clock] = None) -> None:
        self.db = validation.check_database("db", db)
        self.clock = validation.check_clock(clock if clock is not None else system_clock)
        self._stats = StatsReader(db)

    def _now_us(self) -> int:
        return now_micros(self.clock)

    # -- reading ---------------------------------------------------------------------------

    def queues(self) -> Tuple[str, ...]:
        """Names of the queues that hold at least one job, sorted."""
        return tuple(queue_names(self.db))

    def jobs(self, queue: Optional[str] = None, state: Union[JobState, str, None] = None,
             tenant_id: Optional[str] = None, wire_name: Optional[str] = None,
             failure: Union[Failure, str, None] = None, since: Optional[Instant] = None,
             until: Optional[Instant] = None, limit: int = 50, after: Optional[str] = None,
             *, include_payload: bool = False) -> JobPage:
        """One page of jobs matching every filter given, newest first (by id: ids begin
        with their creation millisecond). ``since``/``until`` bound the creation time
        (an aware datetime, or a timedelta before now; since inclusive, until
        exclusive); ``failure`` matches the last failure category. ``after`` is the
        ``next_cursor`` of the previous page: keyset pagination, so jobs added or
        changed meanwhile never make a job appear twice or be skipped. ``limit``
        1..1000. No payload unless ``include_payload``."""
        f = JobFilter.build(self._now_us(), queue, state, tenant_id, wire_name, failure,
                            since, until)
        cursor = check_cursor(after)
        size = page_limit(limit)
        columns = SUMMARY_COLUMNS + (", payload" if include_payload else "")
        rows = read_newest(self.db, columns, f, cursor, size + 1)
        jobs = tuple(JobSummary(**_summary_fields(row),
                                payload=row[14] if include_payload else None)
                     for row in rows[:size])
        return JobPage(jobs, str(jobs[-1].job_id) if len(rows) > size else None)

    def job(self, job_id: Union[uuid.UUID, str], *,
            include_payload: bool = False) -> Optional[JobDetail]:
        """The job's envelope and failure history (oldest first), or None for an
        unknown id. Any tenant. No payload unless ``include_payload``."""
        ident = validation.check_uuid("job_id", job_id)
        p = self.db.param
        columns = DETAIL_COLUMNS + (", payload" if include_payload else "")
        row = self.db.execute_sql(f"SELECT {columns} FROM {JOBS_TABLE} WHERE id = {p}",
                                  (ident,)).fetchone()
        if row is None:
            return None
        return JobDetail(**_summary_fields(row),
                         payload=row[18] if include_payload else None,
                         idempotency_key=row[14], claimed_at=_maybe_ms(row[15]),
                         updated_at=_maybe_ms(row[16]), renewals=row[17],
                         failures=self.failures(ident))

    def failures(self, job_id: Union[uuid.UUID, str]) -> Tuple[FailureRecord, ...]:
        """The job's recorded failed attempts, oldest first (at most the last 20)."""
        ident = validation.check_uuid("job_id", job_id)
        rows = self.db.execute_sql(
            f"SELECT seq, failed_at, attempt, replays, category, error_type, site, "
            f"description FROM {FAILURES_TABLE} WHERE job_id = {self.db.param} "
            f"ORDER BY seq", (ident,)).fetchall()
        return tuple(FailureRecord(seq, from_ms(int(at)), attempt, replays, Failure(category),
                                   error_type, site, description)
                     for seq, at, attempt, replays, category, error_type, site, description
                     in rows)

    def stats(self, queue: Optional[str] = None, since: Instant = DEFAULT_WINDOW, *,
              by_tenant: bool = False) -> QueueStats:
        """Figures for every queue (or ``queue``): ready, delayed, leased, expired and
        dead-lettered jobs now, the age of the oldest ready job; jobs completed,
        attempts failed and jobs dead-lettered per minute since ``since`` (a timedelta
        before now, default one hour, or an aware datetime); pickup latency p50/p95
        from the most recent finished jobs of the window. ``by_tenant`` adds the
        waiting, leased and dead-lettered jobs per queue and tenant."""
        if queue is not None:
            validation.check_queue(queue)
        now_us = self._now_us()
        now_ms = floor_ms(now_us)
        f = JobFilter.build(now_us, since=since)
        since_ms = f.since_ms if f.since_ms is not None else now_ms
        summaries, series = self._stats.queues(queue, now_ms, since_ms)
        p50, p95, sample = self._stats.pickup(queue, since_ms)
        tenants = self._stats.tenants(queue, now_ms) if by_tenant else ()
        return QueueStats(from_ms(now_ms), from_ms(since_ms), summaries, series, p50, p95,
                          sample, tenants)
