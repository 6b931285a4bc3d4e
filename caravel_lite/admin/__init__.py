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
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import peewee

from caravel_lite import validation
from caravel_lite.admin import lookup, retention
from caravel_lite.admin.control import CONTROL_COLUMNS, AdminControl, control_fields
from caravel_lite.admin.limited import LimitedKey, limited_keys
from caravel_lite.admin.filters import (Instant, JobFilter, check_cursor, matching_rows,
                                        page_limit, queue_names, read_newest,
                                        recheck)
from caravel_lite.admin.stats import StatsReader
from caravel_lite.admin.workflows import WorkflowPage, WorkflowViews
from caravel_lite.workflows.membership import MARKED, UNMARKED
from caravel_lite.workflows.operator import end_marked, end_member
from caravel_lite.admin.values import (FailureRecord, JobDetail, workflow_fields, JobPage, JobSummary,
                                       MinuteCount, PruneProgress, QueueStats,
                                       QueueSummary, TenantCounts)
from caravel_lite.clock import Clock, floor_ms, from_ms, now_micros, system_clock
from caravel_lite.dialect import dialect_of
from caravel_lite.logfields import fields
from caravel_lite.retry import retrying
from caravel_lite.errors import InvalidField
from caravel_lite.observability import Telemetry, default_telemetry, logger
from caravel_lite.schema import FAILURES_TABLE, JOBS_TABLE
from caravel_lite.values import Failure, JobState, Priority

__all__ = ["QueueAdmin", "LimitedKey", "JobSummary", "JobPage", "JobDetail", "FailureRecord",
           "QueueSummary", "TenantCounts", "MinuteCount", "QueueStats", "PruneProgress",
           "WorkflowPage"]

SUMMARY_COLUMNS = ("id, queue, tenant_id, wire_name, state, priority, attempts, max_attempts, "
                   "available_at, enqueued_at, finished_at, lease_expires_at, last_failure, "
                   "replay_count, claimed_at")
DETAIL_COLUMNS = SUMMARY_COLUMNS + ", idempotency_key, updated_at, renewals"
DEFAULT_WINDOW = timedelta(hours=1)
ACTION_BATCH = 500
# Branches of one UNION ALL reading jobs' newest failure (SQLite allows 500).
ERROR_TYPE_BATCH = 200
DEAD = JobState.DEAD_LETTER.value
PENDING = JobState.PENDING.value
CANCELLED = JobState.CANCELLED.value


def _maybe_ms(value: Any) -> Optional[datetime]:
    return from_ms(int(value)) if value is not None else None


def _summary_fields(row: Sequence[Any]) -> Dict[str, Any]:
    return dict(
        job_id=uuid.UUID(row[0]), queue_name=row[1], tenant_id=row[2], wire_name=row[3],
        state=JobState(row[4]), priority=Priority(row[5]), attempts=row[6],
        max_attempts=row[7], available_at=from_ms(int(row[8])),
        enqueued_at=from_ms(int(row[9])), finished_at=_maybe_ms(row[10]),
        lease_expires_at=_maybe_ms(row[11]),
        last_failure=Failure(row[12]) if row[12] else None, replay_count=row[13],
        claimed_at=_maybe_ms(row[14]))


class QueueAdmin(AdminControl, WorkflowViews):
    """Operator views and actions over every tenant of the queue database ``db``
    (migrated with :func:`caravel_lite.migrate`). ``clock`` is the source of "now"
    (the system UTC clock by default), as for :class:`~caravel_lite.DatabaseQueue`;
    ``telemetry`` receives the counters of its actions (replays, discards: the
    process-wide one by default).
    """

    def __init__(self, db: peewee.Database, *, clock: Optional[Clock] = None,
                 telemetry: Optional[Telemetry] = None) -> None:
        self.db = validation.check_database("db", db)
        self.clock = validation.check_clock(clock if clock is not None else system_clock)
        self._stats = StatsReader(db)
        self._pruner = retention.Pruner(db, clock=self.clock)
        self._telemetry = telemetry if telemetry is not None else default_telemetry()
        p = db.param
        # now_ms (available), now_ms (updated), ids...: as DatabaseQueue.replay, for
        # any tenant.
        self._replay = (
            f"UPDATE {JOBS_TABLE} SET state = '{PENDING}', attempts = 0, available_at = {p}, "
            f"last_failure = NULL, finished_at = NULL, replay_count = replay_count + 1, "
            f"cancel_requested_at = NULL, updated_at = {p} "
            f"WHERE state IN ('{DEAD}', '{CANCELLED}') AND id IN ({{ids}})")
        # now_ms (available), now_ms (updated), then "id IN (...) AND <filter>".
        self._replay_many = (
            f"UPDATE {JOBS_TABLE} SET state = '{PENDING}', attempts = 0, available_at = {p}, "
            f"last_failure = NULL, finished_at = NULL, replay_count = replay_count + 1, "
            f"cancel_requested_at = NULL, updated_at = {p} WHERE")
        # now_ms (finished), now_ms (updated), then "id IN (...) AND <filter>".
        self._discard_many = (
            f"UPDATE {JOBS_TABLE} SET state = '{DEAD}', last_failure = "
            f"'{Failure.DISCARDED.value}', finished_at = {p}, updated_at = {p} WHERE")
        self._discard = (
            f"UPDATE {JOBS_TABLE} SET state = '{DEAD}', last_failure = "
            f"'{Failure.DISCARDED.value}', finished_at = {p}, updated_at = {p} "
            f"WHERE id = {p} AND state = '{PENDING}'")

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
        columns = SUMMARY_COLUMNS + CONTROL_COLUMNS + (", payload" if include_payload else "")
        rows = read_newest(self.db, columns, f, cursor, size + 1)
        error_types = self._last_error_types([row for row in rows[:size] if row[12]])
        jobs = tuple(JobSummary(**_summary_fields(row), **control_fields(row, 15),
                                payload=row[19] if include_payload else None,
                                last_error_type=error_types.get(row[0]))
                     for row in rows[:size])
        return JobPage(jobs, str(jobs[-1].job_id) if len(rows) > size else None)

    def _last_error_types(self, rows: Sequence[Sequence[Any]]) -> Dict[str, str]:
        """id -> the exception type of each job's last failure, for the rows (summary
        columns) that have one: the newest history record of each job, one primary-key
        seek each, when its category is the job's last failure (a lease expiry records
        nothing, so an older record would name another failure's exception)."""
        last = {row[0]: row[12] for row in rows}
        found: Dict[str, str] = {}
        ids = list(last)
        one = (f"SELECT * FROM (SELECT job_id, category, error_type FROM {FAILURES_TABLE} "
               f"WHERE job_id = {self.db.param} ORDER BY seq DESC LIMIT 1) AS t{{n}}")
        for start in range(0, len(ids), ERROR_TYPE_BATCH):
            chunk = ids[start:start + ERROR_TYPE_BATCH]
            sql = " UNION ALL ".join(one.format(n=n) for n in range(len(chunk)))
            for job_id, category, error_type in self.db.execute_sql(sql, chunk):
                if error_type and last[job_id] == category:
                    found[job_id] = error_type
        return found

    def job(self, job_id: Union[uuid.UUID, str], *,
            include_payload: bool = False) -> Optional[JobDetail]:
        """The job's envelope and failure history (oldest first), or None for an
        unknown id. Any tenant. No payload, and no kept result, unless
        ``include_payload``."""
        ident = validation.check_uuid("job_id", job_id)
        p = self.db.param
        columns = (DETAIL_COLUMNS + CONTROL_COLUMNS
                   + (", payload, result" if include_payload else "") + ", job_options")
        row = self.db.execute_sql(f"SELECT {columns} FROM {JOBS_TABLE} WHERE id = {p}",
                                  (ident,)).fetchone()
        if row is None:
            return None
        history = self.failures(ident)
        fields = _summary_fields(row)
        error_type = (history[-1].error_type
                      if history and history[-1].category is fields["last_failure"] else None)
        return JobDetail(**fields, **control_fields(row, 18),
                         worker_id=self._holder(fields["state"], ident),
                         payload=row[22] if include_payload else None,
                         result=row[23] if include_payload else None,
                         last_error_type=error_type,
                         idempotency_key=row[15], updated_at=_maybe_ms(row[16]),
                         renewals=row[17], failures=history,
                         **workflow_fields(row[-1]))

    def job_ids(self, prefix: str, limit: int = 2) -> Tuple[uuid.UUID, ...]:
        """The ids of the jobs (any tenant) that begin with ``prefix``, as copied from a
        listing (hex digits, hyphens ignored), in id order, at most ``limit`` (1..100):
        one match is the job meant, two say the prefix is ambiguous. One range read of
        the primary key (see :mod:`caravel_lite.admin.lookup`)."""
        return lookup.ids_with_prefix(self.db, prefix, limit)

    def failures(self, job_id: Union[uuid.UUID, str]) -> Tuple[FailureRecord, ...]:
        """The job's recorded failed attempts, oldest first (at most the last 20)."""
        ident = validation.check_uuid("job_id", job_id)
        rows = self.db.execute_sql(
            f"SELECT seq, failed_at, attempt, replays, category, error_type, site, "
            f"description, message, trace FROM {FAILURES_TABLE} "
            f"WHERE job_id = {self.db.param} ORDER BY seq", (ident,)).fetchall()
        return tuple(FailureRecord(seq, from_ms(int(at)), attempt, replays, Failure(category),
                                   error_type, site, description, message, trace)
                     for seq, at, attempt, replays, category, error_type, site, description,
                     message, trace in rows)

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

    def limited_keys(self, queue: Optional[str] = None) -> Tuple[LimitedKey, ...]:
        """Concurrency keys (``Dispatch(concurrency_key=...)``) with jobs waiting behind
        their limit: per queue (or ``queue``) and key, the jobs leased and waiting."""
        if queue is not None:
            validation.check_queue(queue)
        return limited_keys(self.db, dialect_of(self.db), queue)

    # -- acting ------------------------------------------------------------------------------

    def _bulk_filter(self, verb: str, allowed: Tuple[JobState, ...], queue: Optional[str],
                     state: Union[JobState, str, None], tenant_id: Optional[str],
                     wire_name: Optional[str], failure: Union[Failure, str, None],
                     since: Optional[Instant], until: Optional[Instant]) -> JobFilter:
        """The validated filter of a bulk action, its state one of ``allowed`` (the
        first when None)."""
        f = JobFilter.build(self._now_us(), queue, state, tenant_id, wire_name, failure,
                            since, until)
        if f.state is None:
            return f.with_state(allowed[0])
        if f.state not in allowed:
            names = " or ".join(s.value for s in allowed)
            raise InvalidField("state", f"only {names} jobs can be {verb}")
        return f

    @staticmethod
    def _check_scope(verb: str, noun: str, everything: object,
                     filters: Sequence[object]) -> None:
        """A bulk delete or discard names at least one filter, or says
        ``everything=True``: a filter left empty (``queue=None`` from a value the
        caller did not have) must not widen it to every job of every queue and
        tenant."""
        if everything is not True and everything is not False:
            raise InvalidField("everything", "must be True or False")
        if not everything and all(value is None for value in filters):
            raise InvalidField("everything", f"no filter given: name at least one (queue, "
                                             f"state, tenant_id, wire_name, failure, since, "
                                             f"until), or pass everything=True to {verb} "
                                             f"every {noun}")

    def _by_queue(self, rows: Sequence[Sequence[Any]]) -> Dict[str, List[str]]:
        by_queue: Dict[str, List[str]] = {}
        for job_id, queue_name in rows:
            by_queue.setdefault(queue_name, []).append(job_id)
        return by_queue

    def _update_matching(self, f: JobFilter, template: str, stamps: int,
                         counter: Callable[[str, int], None],
                         ending: Optional[str] = None) -> int:
        """Run ``template`` (an UPDATE ending in ``WHERE``, its first ``stamps``
        parameters now in ms) over every job matching ``f``, batch by batch, one
        statement per batch and queue that checks ``f`` again: how many rows it
        changed. ``ending``: the final state it moves a PENDING job to, whose batch
        must count it; the statement then leaves out the jobs of a workflow, and when
        it changed fewer than its ids those are ended one by one, each with its
        batch's count (:func:`~caravel_lite.workflows.operator.end_marked`), as
        :meth:`discard` ends one."""
        condition, condition_params = recheck(self.db.param, f)
        p = self.db.param
        dialect = dialect_of(self.db)
        total = 0
        for rows in matching_rows(self.db, f, ACTION_BATCH):
            now_ms = floor_ms(self._now_us())
            head = [now_ms] * stamps
            for queue_name, ids in self._by_queue(rows).items():  # exact counts per queue
                sql = f"{template} id IN ({', '.join([p] * len(ids))}) AND {condition}"
                params = [*head, *ids, *condition_params]
                if ending is not None:
                    sql += f" AND {UNMARKED.format(p=p)}"
                    params.append(MARKED)
                changed = retrying(dialect, self.db,
                                   lambda: int(self.db.execute_sql(sql, params).rowcount))
                if ending is not None and changed < len(ids):
                    changed += end_marked(
                        self.db, dialect, ids, f"{template} id = {p} AND {condition}",
                        lambda ident: [*head, ident, *condition_params], ending, now_ms)
                total += changed
                if changed:
                    counter(queue_name, changed)
        return total

    def _count_matching(self, f: JobFilter) -> int:
        return sum(len(rows) for rows in matching_rows(self.db, f, ACTION_BATCH))

    def replay_many(self, queue: Optional[str] = None,
                    state: Union[JobState, str, None] = JobState.DEAD_LETTER,
                    tenant_id: Optional[str] = None, wire_name: Optional[str] = None,
                    failure: Union[Failure, str, None] = None, since: Optional[Instant] = None,
                    until: Optional[Instant] = None, *, dry_run: bool = False) -> int:
        """Replay every dead letter matching the filters (those of :meth:`jobs`; only
        dead letters and cancelled jobs can be replayed, so ``state`` may only be
        DEAD_LETTER, the default, or CANCELLED), as
        ``DatabaseQueue.replay`` does one: same id and payload, attempts reset, due
        now, failure cleared, replay_count + 1. Returns how many were replayed, or
        with ``dry_run`` how many would be, changing nothing. Works through the
        matches newest first in batches of 500, each one UPDATE that checks the state
        and every filter again (a job replayed, deleted or failed otherwise meanwhile
        is not touched and not counted). Replay can repeat side effects."""
        f = self._bulk_filter("replayed", (JobState.DEAD_LETTER, JobState.CANCELLED), queue,
                              state, tenant_id, wire_name, failure, since, until)
        if dry_run:
            return self._count_matching(f)
        total = self._update_matching(
            f, self._replay_many, 2,
            lambda queue_name, n: self._telemetry.count("replayed", queue_name, n))
        if total:
            logger.info("replayed %d dead letter(s)", total, extra=fields(count=total))
        return total

    def discard_many(self, queue: Optional[str] = None,
                     state: Union[JobState, str, None] = None,
                     tenant_id: Optional[str] = None, wire_name: Optional[str] = None,
                     failure: Union[Failure, str, None] = None,
                     since: Optional[Instant] = None, until: Optional[Instant] = None, *,
                     dry_run: bool = False, everything: bool = False) -> int:
        """Discard every PENDING job matching the filters (those of :meth:`jobs`;
        ``state`` may only be PENDING), as :meth:`discard` does one. At least one
        filter is required, or ``everything=True`` for every pending job (else
        ``InvalidField("everything")``, nothing changed). Returns how many were
        discarded, or with ``dry_run`` how many match now. Batches of 500, each one
        UPDATE that checks the state and every filter again: a job claimed meanwhile
        (leased, running) or whose last failure changed is left alone and not
        counted."""
        self._check_scope("discard", "pending job", everything,
                          (queue, state, tenant_id, wire_name, failure, since, until))
        f = self._bulk_filter("discarded", (JobState.PENDING,), queue, state, tenant_id,
                              wire_name, failure, since, until)
        if dry_run:
            return self._count_matching(f)
        # Pending batch members are discarded with their batch's count.
        total = self._update_matching(
            f, self._discard_many, 2,
            lambda queue_name, n: self._telemetry.count(
                "deadlettered", queue_name, n, failure=Failure.DISCARDED.value), DEAD)
        if total:
            logger.info("discarded %d pending job(s)", total, extra=fields(count=total))
        return total

    def delete_many(self, queue: Optional[str] = None,
                    state: Union[JobState, str, None] = None,
                    tenant_id: Optional[str] = None, wire_name: Optional[str] = None,
                    failure: Union[Failure, str, None] = None,
                    since: Optional[Instant] = None, until: Optional[Instant] = None, *,
                    dry_run: bool = False, everything: bool = False) -> int:
        """Delete every finished job matching the filters (those of :meth:`jobs`;
        ``state`` DEAD_LETTER, the default, or COMPLETED), with its failure history,
        as :meth:`delete` does one. At least one filter is required, or
        ``everything=True`` for every dead letter (else ``InvalidField("everything")``,
        nothing deleted). Returns how many were deleted, or with ``dry_run`` how
        many match now. Batches of 500, each one DELETE that checks
        the state and every filter again when it runs: a dead letter replayed
        meanwhile is pending and is kept (and not counted). The batches are paced as
        :meth:`prune`'s are. Deleted idempotency keys become free again."""
        self._check_scope("delete", "dead letter", everything,
                          (queue, state, tenant_id, wire_name, failure, since, until))
        f = self._bulk_filter("deleted", (JobState.DEAD_LETTER, JobState.COMPLETED), queue,
                              state, tenant_id, wire_name, failure, since, until)
        if dry_run:
            return self._count_matching(f)
        condition, params = recheck(self.db.param, f)
        total = self._pruner.delete_each(
            ([row[0] for row in rows] for rows in matching_rows(self.db, f, ACTION_BATCH)),
            condition, params)
        if total:
            logger.info("deleted %d job(s)", total, extra=fields(count=total))
        return total

    def replay(self, job_id: Union[uuid.UUID, str]) -> bool:
        """Replay one dead letter or cancelled job of any tenant (as :meth:`replay_many`
        does); False
        for any other state, an unknown id, or the loser of two simultaneous replays."""
        ident = validation.check_uuid("job_id", job_id)
        row = self.db.execute_sql(f"SELECT queue FROM {JOBS_TABLE} WHERE id = {self.db.param}",
                                  (ident,)).fetchone()
        if row is None:
            return False
        now_ms = floor_ms(self._now_us())
        sql = self._replay.format(ids=self.db.param)
        changed = retrying(dialect_of(self.db), self.db,
                           lambda: int(self.db.execute_sql(sql, (now_ms, now_ms, ident)).rowcount))
        if changed:
            self._telemetry.count("replayed", row[0])
        return changed == 1

    def discard(self, job_id: Union[uuid.UUID, str]) -> bool:
        """Move a PENDING job (waiting or delayed, any tenant) to DEAD_LETTER with the
        failure ``DISCARDED``, so that it never runs unless replayed. False (nothing
        changed) for any other state or an unknown id: a leased job is running and
        cannot be discarded."""
        ident = validation.check_uuid("job_id", job_id)
        # The queue names the counter; a job's queue never changes, so it can be read
        # before the update.
        row = self.db.execute_sql(f"SELECT queue, job_options FROM {JOBS_TABLE} "
                                  f"WHERE id = {self.db.param}", (ident,)).fetchone()
        if row is None:
            return False
        now_ms = floor_ms(self._now_us())
        # A batch member is discarded with its batch's count.
        changed = bool(end_member(self.db, dialect_of(self.db), row[1], ident, self._discard,
                                  (now_ms, now_ms, ident), DEAD, now_ms))
        changed = changed or retrying(
            dialect_of(self.db), self.db,
            lambda: int(self.db.execute_sql(self._discard, (now_ms, now_ms, ident)).rowcount)) == 1
        if changed:
            # Counted as the worker counts a job dead-lettered by ``Discard`` (no
            # attempt failed here, so not ``failed``).
            self._telemetry.count("deadlettered", row[0], failure=Failure.DISCARDED.value)
            logger.info("job %s discarded by an operator", ident, extra=fields(job_id=ident))
        return changed

    def delete(self, job_id: Union[uuid.UUID, str],
               state: Union[JobState, str, None] = None) -> bool:
        """Delete one job of any tenant, with its failure history, unless it is leased
        (running), and when ``state`` is given only if the job is still in that state
        when the DELETE runs (the statement checks it: a dead letter an operator saw,
        replayed by another one meanwhile, is kept). Its idempotency key becomes free
        again: the same key then makes a new job. False when leased, in another state
        than ``state``, or unknown."""
        ident = validation.check_uuid("job_id", job_id)
        f = JobFilter.build(self._now_us(), state=state)
        if f.state is None:
            return self._pruner.delete(ident)
        if f.state is JobState.LEASED:
            raise InvalidField("state", "a leased job is running and cannot be deleted")
        condition, params = recheck(self.db.param, f)
        return self._pruner.delete(ident, condition, params)

    def prune(self, older_than: Union[timedelta, datetime],
              states: Iterable[Union[JobState, str]] = retention.FINISHED,
              queue: Optional[str] = None, batch_size: Optional[int] = None,
              progress: Optional[retention.Progress] = None, *,
              dry_run: bool = False,
              scheduler: Optional[retention.KeepsScheduleKeys] = None) -> int:
        """Delete jobs in ``states`` (COMPLETED and/or DEAD_LETTER) that finished before
        ``older_than`` (an aware datetime, or a timedelta before now), of ``queue``
        only when given, with their failure history, ``batch_size`` (1..10000; by
        default the database's: 100 on SQLite, 1000 elsewhere) per short transaction,
        pausing after each batch for a time set by how long it took (see
        :mod:`caravel_lite.admin.retention`) so that workers keep claiming meanwhile.
        Pending and leased jobs are never touched. ``progress`` is called with a
        :class:`PruneProgress` before the first batch and after each one. Returns how
        many were deleted, or with ``dry_run`` how many match now, deleting nothing.
        Pruned idempotency keys lose their duplicate protection: with ``scheduler``
        (the application's :class:`~caravel_lite.QueueScheduler`) an ``older_than``
        shorter than ``scheduler.min_prune_age`` of the pruned queues raises
        ``InvalidField("older_than")`` and deletes nothing, since a slot whose job went
        would be enqueued again; without it no schedule is known and none is checked."""
        chosen = retention.check_states(states)
        now_us = self._now_us()
        cutoff = retention.cutoff_ms(older_than, now_us)
        retention.check_schedule_keys(older_than, now_us, scheduler, queue)
        if progress is not None and not callable(progress):
            raise InvalidField("progress", "must be a callable taking a PruneProgress")
        self._pruner.check_batch_size(batch_size)
        if dry_run:
            return self._pruner.count(cutoff, chosen, queue)
        return self._pruner.prune(cutoff, chosen, queue, batch_size, progress)
