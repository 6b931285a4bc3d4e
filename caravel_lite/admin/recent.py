"""Recent outcomes by queue and category, for the metrics endpoint
(``caravel_lite.metrics``), each from an index, never from a scan of the history:

- jobs completed per queue in the last minute and the last hour, from the prune index
  ``(state, finished_at, queue)``: the cost follows the jobs finished in the hour;
- attempts failed per queue and category in the same windows, from the failure
  history's ``(failed_at, queue)`` index (the category is read from each row of the
  hour);
- jobs dead-lettered per queue and category in the same windows, from the prune
  index (the category is read from each dead letter of the hour);
- pickup latency per queue over its most recent finished jobs of the hour (at most
  PICKUP_SAMPLE of each state per queue), all queues in one round trip.

Dead letters *kept* are counted by ``caravel_jobs{state="dead_letter"}`` (the claim
index's count); their categories are not: that would read every dead letter's row at
each scrape (about 250 ms for 27,000 of them on SQLite here).
"""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

import peewee

from caravel_lite.admin.filters import name_literal
from caravel_lite.dialect import dialect_of
from caravel_lite.schema import FAILURE_INDEXES, FAILURES_TABLE, JOBS_TABLE, PRUNE_INDEX
from caravel_lite.values import JobState

COMPLETED = JobState.COMPLETED.value
DEAD = JobState.DEAD_LETTER.value
PICKUP_SAMPLE = 200


class RecentReader:
    """The statements, built once per database; queue names are written in as
    literals (see :func:`caravel_lite.admin.filters.name_literal`), instants bound."""

    def __init__(self, db: peewee.Database) -> None:
        p = db.param
        dialect = dialect_of(db)
        self.db = db
        # Named indexes where the dialect takes a hint, as QueueAdmin.stats does: the
        # plan of a window must not depend on what the statistics say.
        finished = dialect.table_via(JOBS_TABLE, PRUNE_INDEX)
        failed = dialect.table_via(FAILURES_TABLE, FAILURE_INDEXES[0].name)
        # params: minute_ms, hour_ms
        self.completed = (
            f"SELECT queue, SUM(CASE WHEN finished_at >= {p} THEN 1 ELSE 0 END), COUNT(*) "
            f"FROM {finished} WHERE state = '{COMPLETED}' AND finished_at >= {p} "
            f"GROUP BY queue")
        self.failed = (
            f"SELECT queue, category, SUM(CASE WHEN failed_at >= {p} THEN 1 ELSE 0 END), "
            f"COUNT(*) FROM {failed} WHERE failed_at >= {p} GROUP BY queue, category")
        self.dead_lettered = (
            f"SELECT queue, last_failure, SUM(CASE WHEN finished_at >= {p} THEN 1 ELSE 0 "
            f"END), COUNT(*) FROM {finished} WHERE state = '{DEAD}' AND finished_at >= {p} "
            f"GROUP BY queue, last_failure")
        # One branch per queue and finished state, newest first in the prune index's
        # order. params per branch: since_ms.
        self.pickup_branch = (
            f"SELECT * FROM (SELECT queue, claimed_at - available_at FROM {finished} "
            f"WHERE state = {{state}} AND finished_at >= {p} AND queue = {{queue}} "
            f"ORDER BY finished_at DESC LIMIT {PICKUP_SAMPLE}) AS {{name}}")

    def _rows(self, sql: str, params: Sequence[Any]) -> List[Tuple[Any, ...]]:
        return list(self.db.execute_sql(sql, params).fetchall())

    def completed_since(self, minute_ms: int, hour_ms: int) -> Dict[str, Tuple[int, int]]:
        """{queue: (completed since minute_ms, completed since hour_ms)}."""
        return {queue: (int(minute or 0), int(hour))
                for queue, minute, hour in self._rows(self.completed, (minute_ms, hour_ms))}

    def failed_since(self, minute_ms: int, hour_ms: int
                     ) -> Dict[Tuple[str, str], Tuple[int, int]]:
        """{(queue, category): (failed since minute_ms, failed since hour_ms)}."""
        return {(queue, category): (int(minute or 0), int(hour))
                for queue, category, minute, hour in self._rows(self.failed,
                                                                (minute_ms, hour_ms))}

    def dead_lettered_since(self, minute_ms: int, hour_ms: int
                            ) -> Dict[Tuple[str, str], Tuple[int, int]]:
        """{(queue, category): (dead-lettered since minute_ms, since hour_ms)}."""
        return {(queue, category or "unknown"): (int(minute or 0), int(hour))
                for queue, category, minute, hour in self._rows(self.dead_lettered,
                                                                (minute_ms, hour_ms))}

    def pickups(self, queue_names: Sequence[str], since_ms: int
                ) -> Dict[str, Tuple[float, float]]:
        """{queue: (p50, p95) seconds} of pickup latency (claim time minus due time)
        over each queue's most recent finished jobs since ``since_ms``; a queue with
        none is left out."""
        branches = [self.pickup_branch.format(state=name_literal(state),
                                              queue=name_literal(name), name=f"s{n}_{k}")
                    for n, name in enumerate(queue_names)
                    for k, state in enumerate((COMPLETED, DEAD))]
        if not branches:
            return {}
        found: Dict[str, List[int]] = defaultdict(list)
        for queue, latency in self._rows(" UNION ALL ".join(branches),
                                         [since_ms] * len(branches)):
            if latency is not None:
                found[queue].append(max(int(latency), 0))
        return {queue: (_rank(sorted(values), 0.50) / 1000, _rank(sorted(values), 0.95) / 1000)
                for queue, values in found.items()}


def _rank(ordered: List[int], fraction: float) -> int:
    """The nearest-rank percentile of an ordered, non-empty list."""
    return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]
