"""The figures of ``QueueAdmin.stats``, each from an index, never from a scan of the
finished history:

- per queue, the waiting, leased and dead-lettered jobs (one read of the queue's rows in
  those states, led by the claim index: its cost follows the jobs that are not
  completed, not the history);
- jobs completed and dead-lettered per minute and queue since the window's start, from
  the prune index ``(state, finished_at, queue)``, and attempts failed per minute from
  the failure history's ``(failed_at, queue)`` index: their cost follows the jobs
  finished in the window;
- pickup latency (claim time minus due time) from the most recent finished jobs of the
  window, at most PICKUP_SAMPLE of them.
"""
from __future__ import annotations

import math
from collections import defaultdict
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence, Tuple

import peewee

from caravel_lite.admin.filters import name_literal, queue_names
from caravel_lite.admin.values import MinuteCount, QueueSummary, TenantCounts
from caravel_lite.clock import from_ms
from caravel_lite.dialect import dialect_of, literal_percent
from caravel_lite.schema import (FAILURE_INDEXES, FAILURES_TABLE, JOBS_TABLE, PRUNE_INDEX,
                                 listing_index)
from caravel_lite.values import JobState

PICKUP_SAMPLE = 1000
FAILED_AT_INDEX = FAILURE_INDEXES[0]  # (failed_at, queue)
MINUTE_MS = 60_000

PENDING = JobState.PENDING.value
LEASED = JobState.LEASED.value
COMPLETED = JobState.COMPLETED.value
DEAD = JobState.DEAD_LETTER.value


class StatsReader:
    """The statements of the stats, built once per database. Queue names and states
    are written in as literals when a statement runs (see
    :func:`caravel_lite.admin.filters.name_literal`), instants are bound."""

    def __init__(self, db: peewee.Database) -> None:
        p = db.param
        mod = literal_percent(db)
        t = JOBS_TABLE
        self.db = db
        # One covering read per queue and state, each from the index led by (queue,
        # state) that holds what it counts: the claim index (due times) for pending
        # jobs, the lease index (expiries) for leased ones, then dead letters; MIN over
        # the ready rows is the oldest job due. All of them in one statement (UNION
        # ALL), one round trip. Parameters per queue: now_ms x3.
        self.live_branch = (
            f"SELECT {{queue}}, 0, SUM(CASE WHEN available_at <= {p} THEN 1 ELSE 0 END), "
            f"COUNT(*), MIN(CASE WHEN available_at <= {p} THEN available_at END) "
            f"FROM {t} WHERE queue = {{queue}} AND state = '{PENDING}' "
            f"UNION ALL SELECT {{queue}}, 1, SUM(CASE WHEN lease_expires_at > {p} THEN 1 "
            f"ELSE 0 END), COUNT(*), NULL FROM {t} WHERE queue = {{queue}} "
            f"AND state = '{LEASED}' "
            f"UNION ALL SELECT {{queue}}, 2, 0, COUNT(*), NULL FROM {t} "
            f"WHERE queue = {{queue}} AND state = '{DEAD}'")
        # Equality on every leading index column, one state per statement: a planner
        # with statistics (SQLite after ANALYZE or PRAGMA optimize) otherwise may
        # prefer to read a state IN (...) list from the whole table.
        # now_ms x2.
        self.live_by_tenant: Dict[str, str] = {}
        for state in (PENDING, LEASED, DEAD):
            spec = listing_index(dialect_of(db), state, by_tenant=False)
            assert spec is not None  # by queue, every state has one
            by_queue = dialect_of(db).table_via(t, spec.name)
            also = f" AND {spec.where}" if spec.where is not None else ""
            self.live_by_tenant[state] = (
                f"SELECT tenant_id, SUM(CASE WHEN available_at <= {p} THEN 1 ELSE 0 END), "
                f"SUM(CASE WHEN lease_expires_at > {p} THEN 1 ELSE 0 END), COUNT(*) "
                f"FROM {by_queue} WHERE queue = {{queue}} AND state = '{state}'{also} "
                f"GROUP BY tenant_id")
        minute = f"finished_at - finished_at {mod} {MINUTE_MS}"
        # since_ms. The prune index is named where the dialect takes a hint: SQLite
        # with statistics (ANALYZE, PRAGMA optimize) but no histogram otherwise
        # skip-scans the (queue, state, id) index, reading every finished job of every
        # queue (2 s instead of a few ms on a million jobs); tests/admin/test_plans.py
        # checks the plan with the statistics of a million jobs.
        finished = dialect_of(db).table_via(t, PRUNE_INDEX)
        self.finished = (
            f"SELECT {{state}}, queue, {minute}, COUNT(*) FROM {finished} "
            f"WHERE state = {{state}} AND finished_at >= {p} GROUP BY queue, {minute}")
        failed_minute = f"failed_at - failed_at {mod} {MINUTE_MS}"
        # Named for the same reason as the prune index: the plan of a window must not
        # depend on what the statistics say (its only alternative reads the whole
        # failure history).
        by_failed_at = dialect_of(db).table_via(FAILURES_TABLE, FAILED_AT_INDEX.name)
        self.failed = (
            f"SELECT queue, {failed_minute}, COUNT(*) FROM {by_failed_at} "
            f"WHERE failed_at >= {p} GROUP BY queue, {failed_minute}")
        # since_ms; newest finished first, in the prune index's order.
        self.pickups = (
            f"SELECT finished_at, claimed_at - available_at, queue FROM {finished} "
            f"WHERE state = {{state}} AND finished_at >= {p} "
            f"ORDER BY finished_at DESC LIMIT {PICKUP_SAMPLE}")
        self.pickups_of_queue = (
            f"SELECT finished_at, claimed_at - available_at, queue FROM {finished} "
            f"WHERE state = {{state}} AND finished_at >= {p} AND queue = {{queue}} "
            f"ORDER BY finished_at DESC LIMIT {PICKUP_SAMPLE}")

    def _rows(self, sql: str, params: Sequence[Any]) -> List[Tuple[Any, ...]]:
        return list(self.db.execute_sql(sql, params).fetchall())

    def queues(self, only: Optional[str], now_ms: int, since_ms: int
               ) -> Tuple[Tuple[QueueSummary, ...], Tuple[MinuteCount, ...]]:
        """Per-queue summaries (every queue in use, or ``only``) and the per-minute
        series of the window, oldest minute first."""
        names = [only] if only is not None else queue_names(self.db)
        done: Dict[str, int] = defaultdict(int)
        minutes: Dict[int, List[int]] = defaultdict(lambda: [0, 0, 0])
        # Both finished states in one round trip.
        sql = " UNION ALL ".join(self.finished.format(state=name_literal(state))
                                 for state in (COMPLETED, DEAD))
        for state, queue, minute, count in self._rows(sql, (since_ms, since_ms)):
            if only is not None and queue != only:
                continue
            if state == COMPLETED:
                done[queue] += int(count)
            minutes[int(minute)][0 if state == COMPLETED else 2] += int(count)
        failed: Dict[str, int] = defaultdict(int)
        for queue, minute, count in self._rows(self.failed, (since_ms,)):
            if only is not None and queue != only:
                continue
            failed[queue] += int(count)
            minutes[int(minute)][1] += int(count)
        live: Dict[str, List[Any]] = {name: [0, 0, 0, 0, 0, None] for name in names}
        if names:
            sql = " UNION ALL ".join(self.live_branch.format(queue=name_literal(name))
                                     for name in names)
            for name, kind, matching, total, oldest in self._rows(sql, [now_ms] * 3 * len(names)):
                counts = live[name]
                matching, total = int(matching or 0), int(total or 0)
                if kind == 0:  # pending: ready, delayed
                    counts[0], counts[1], counts[5] = matching, total - matching, oldest
                elif kind == 1:  # leased: live, expired
                    counts[2], counts[3] = matching, total - matching
                else:
                    counts[4] = total
        summaries = []
        for name in names:
            ready, delayed, leased, expired, dead, oldest = live[name]
            summaries.append(QueueSummary(
                name, ready, delayed, leased, expired, dead, done[name], failed[name],
                from_ms(int(oldest)) if oldest is not None else None,
                timedelta(milliseconds=now_ms - int(oldest)) if oldest is not None else None))
        series = tuple(MinuteCount(from_ms(m), *minutes[m]) for m in sorted(minutes))
        return tuple(summaries), series

    def tenants(self, only: Optional[str], now_ms: int) -> Tuple[TenantCounts, ...]:
        """Per (queue, tenant): unfinished and dead-lettered jobs. Reads one row per
        such job (no index is led by tenant and state together with due times)."""
        out: List[TenantCounts] = []
        for name in ([only] if only is not None else queue_names(self.db)):
            counts: Dict[str, List[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
            rows = [(tenant, state, due, live, total)
                    for state in (PENDING, LEASED, DEAD)
                    for tenant, due, live, total in self._rows(
                        self.live_by_tenant[state].format(queue=name_literal(name)),
                        (now_ms, now_ms))]
            for tenant, state, due, live, total in rows:
                c = counts[tenant]
                due, live, total = int(due or 0), int(live or 0), int(total)
                if state == PENDING:
                    c[0] += due
                    c[1] += total - due
                elif state == LEASED:
                    c[2] += live
                    c[3] += total - live
                else:
                    c[4] += total
            out += [TenantCounts(name, tenant, *counts[tenant]) for tenant in sorted(counts)]
        return tuple(out)

    def pickup(self, only: Optional[str], since_ms: int
               ) -> Tuple[Optional[timedelta], Optional[timedelta], int]:
        """(p50, p95, sample size) of pickup latency over the newest finished jobs."""
        parts = []
        for n, state in enumerate((COMPLETED, DEAD)):  # one round trip for both states
            if only is None:
                part = self.pickups.format(state=name_literal(state))
            else:
                part = self.pickups_of_queue.format(state=name_literal(state),
                                                    queue=name_literal(only))
            parts.append(f"SELECT * FROM ({part}) AS sample_{n}")
        rows = self._rows(" UNION ALL ".join(parts), (since_ms, since_ms))
        rows.sort(key=lambda r: r[0], reverse=True)
        latencies = sorted(max(int(r[1]), 0) for r in rows[:PICKUP_SAMPLE] if r[1] is not None)
        if not latencies:
            return None, None, 0
        return (timedelta(milliseconds=_rank(latencies, 0.50)),
                timedelta(milliseconds=_rank(latencies, 0.95)), len(latencies))


def _rank(ordered: List[int], fraction: float) -> int:
    """The nearest-rank percentile of an ordered, non-empty list."""
    index = max(math.ceil(fraction * len(ordered)) - 1, 0)
    return ordered[index]
