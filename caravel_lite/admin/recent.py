"""Recent outcomes by queue and category, for the metrics endpoint
(``caravel_lite.metrics``), each from an index, never from a scan of the history:

- jobs completed per queue in the last minute and the last hour, from the prune index
  ``(state, finished_at, queue)``: the cost follows the jobs finished in the hour;
- attempts failed per queue and category in the same windows, from the failure
  history's ``(failed_at, queue)`` index (the category is read from each row of the
  hour);
- dead letters now per queue and category, one read per queue led by the claim index
  ``(queue, state, ...)``: the cost follows the dead letters kept.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import peewee

from caravel_lite.admin.filters import name_literal
from caravel_lite.dialect import dialect_of
from caravel_lite.schema import FAILURE_INDEXES, FAILURES_TABLE, JOBS_TABLE, PRUNE_INDEX
from caravel_lite.values import JobState

COMPLETED = JobState.COMPLETED.value
DEAD = JobState.DEAD_LETTER.value


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
        self.dead_branch = (
            f"SELECT {{queue}}, last_failure, COUNT(*) FROM {JOBS_TABLE} "
            f"WHERE queue = {{queue}} AND state = '{DEAD}' GROUP BY last_failure")

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

    def dead_letters(self, queue_names: Sequence[str]) -> Dict[Tuple[str, str], int]:
        """{(queue, category): dead letters now}, one round trip for every queue."""
        if not queue_names:
            return {}
        sql = " UNION ALL ".join(self.dead_branch.format(queue=name_literal(name))
                                 for name in queue_names)
        return {(queue, category or "unknown"): int(count)
                for queue, category, count in self._rows(sql, ())}
