"""The SQL of chains and batches, built once per queue (plain parameterised text, as
the hot paths' in caravel_lite.statements)."""
from __future__ import annotations

from typing import Dict, Tuple

import peewee

from caravel_lite.schema import JOBS_TABLE, WORKFLOW_JOBS_TABLE, WORKFLOWS_TABLE
from caravel_lite.values import JobState

__all__ = ["WorkflowStatements", "WORKFLOW_COLUMNS"]

HELD = JobState.HELD.value
PENDING = JobState.PENDING.value
CANCELLED = JobState.CANCELLED.value

WORKFLOW_COLUMNS = ("id", "kind", "queue", "tenant_id", "total", "finished", "failed",
                    "on_complete", "on_success", "on_failure", "created_at", "closed_at")
# What a listing reads of a workflow (WORKFLOW_COLUMNS' order).
SUMMARY = ", ".join(WORKFLOW_COLUMNS)


class WorkflowStatements:
    def __init__(self, db: peewee.Database) -> None:
        p = db.param
        self._p = p
        t, w, m = JOBS_TABLE, WORKFLOWS_TABLE, WORKFLOW_JOBS_TABLE
        self._cache: Dict[Tuple[str, int], str] = {}
        self.insert_workflow = (f"INSERT INTO {w} ({', '.join(WORKFLOW_COLUMNS[:-1])}) "
                                f"VALUES ({', '.join([p] * (len(WORKFLOW_COLUMNS) - 1))})")
        self.workflow_exists = f"SELECT 1 FROM {w} WHERE id = {p}"
        # A held job made due (a chain's next step, a batch's callback): only from held,
        # so however often it is asked, one transaction moves it. params: now, id
        self.release = (f"UPDATE {t} SET state = '{PENDING}', updated_at = {p} "
                        f"WHERE id = {p} AND state = '{HELD}'")
        # A callback the batch's outcome rules out ends cancelled. params: now, now, id
        self.rule_out = (f"UPDATE {t} SET state = '{CANCELLED}', finished_at = {p}, "
                         f"updated_at = {p} WHERE id = {p} AND state = '{HELD}'")
        # Counting one job final. closed_at comes first: MariaDB evaluates SET
        # assignments left to right with the values already assigned, and it must
        # read finished before the increment. A batch counts only while open.
        # params: now (closed), id
        self.count_step = (f"UPDATE {w} SET closed_at = CASE WHEN finished + 1 >= total "
                           f"THEN {p} ELSE closed_at END, finished = finished + 1 "
                           f"WHERE id = {p}")
        # params: now (closed), failed (0/1), id
        self.count_member = (f"UPDATE {w} SET closed_at = CASE WHEN finished + 1 >= total "
                             f"THEN {p} ELSE closed_at END, failed = failed + {p}, "
                             f"finished = finished + 1 WHERE id = {p} AND closed_at IS NULL")
        self.tally = (f"SELECT total, finished, failed, on_complete, on_success, on_failure "
                      f"FROM {w} WHERE id = {p}")
        self.replays = f"SELECT replay_count FROM {t} WHERE id = {p}"
        self.summary = f"SELECT {SUMMARY} FROM {w} WHERE id = {p}"
        self.member_ids = (f"SELECT job_id FROM {m} WHERE workflow_id = {p} "
                           f"ORDER BY position")
        # A workflow's jobs by state. params: id
        self.counts = (f"SELECT j.state, COUNT(*) FROM {m} wj JOIN {t} j ON j.id = wj.job_id "
                       f"WHERE wj.workflow_id = {p} GROUP BY j.state")
        # The newest first, of one queue and kind; params: queue, kind, limit
        self.listing = (f"SELECT {SUMMARY} FROM {w} WHERE queue = {p} AND kind = {p} "
                        f"ORDER BY id DESC LIMIT {p}")
        self.listing_before = (f"SELECT {SUMMARY} FROM {w} WHERE queue = {p} AND kind = {p} "
                               f"AND id < {p} ORDER BY id DESC LIMIT {p}")

        # Removing jobs (caravel_lite.workflows.removal). The workflow's row locked by
        # a write that changes nothing: whoever removes its jobs takes it first, so two
        # removals of one workflow's jobs run one after the other. params: id
        self.lock = f"UPDATE {w} SET closed_at = closed_at WHERE id = {p}"
        # Whether any member or step of it is left. params: id
        self.members_left = (f"SELECT 1 FROM {m} wj JOIN {t} j ON j.id = wj.job_id "
                             f"WHERE wj.workflow_id = {p} LIMIT 1")
        # A workflow none of whose jobs is left. params: id
        self.forget_members = f"DELETE FROM {m} WHERE workflow_id = {p}"
        self.forget = f"DELETE FROM {w} WHERE id = {p}"

    def job_counts(self, db: peewee.Database, workflow_id: str) -> Dict[str, int]:
        """A workflow's jobs by state (its callbacks are not among them)."""
        return {str(state): int(n) for state, n in
                db.execute_sql(self.counts, (workflow_id,)).fetchall()}

    def _ids(self, n: int) -> str:
        return ", ".join([self._p] * n)

    def hold(self, n: int) -> str:
        """n new jobs held (written pending in the same transaction). params: *ids"""
        key = ("hold", n)
        if key not in self._cache:
            self._cache[key] = (f"UPDATE {JOBS_TABLE} SET state = '{HELD}' "
                                f"WHERE id IN ({self._ids(n)}) AND state = '{PENDING}'")
        return self._cache[key]

    def rule_out_many(self, n: int) -> str:
        """n held jobs end cancelled (the steps after a removed one). params: now,
        now, *ids"""
        key = ("rule_out", n)
        if key not in self._cache:
            self._cache[key] = (f"UPDATE {JOBS_TABLE} SET state = '{CANCELLED}', "
                                f"finished_at = {self._p}, updated_at = {self._p} "
                                f"WHERE id IN ({self._ids(n)}) AND state = '{HELD}'")
        return self._cache[key]

    def existing(self, n: int) -> str:
        """Which of n jobs exist. params: *ids"""
        key = ("existing", n)
        if key not in self._cache:
            self._cache[key] = f"SELECT id FROM {JOBS_TABLE} WHERE id IN ({self._ids(n)})"
        return self._cache[key]

    def insert_members(self, n: int) -> str:
        """n rows of (workflow_id, position, job_id)."""
        key = ("members", n)
        if key not in self._cache:
            rows = ", ".join([f"({self._p}, {self._p}, {self._p})"] * n)
            self._cache[key] = (f"INSERT INTO {WORKFLOW_JOBS_TABLE} "
                                f"(workflow_id, position, job_id) VALUES {rows}")
        return self._cache[key]
