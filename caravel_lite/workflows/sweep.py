"""Batch members whose expired lease the sweep ends (dead-lettered with attempts used
up, or cancelled on request): each is ended here first, one fenced UPDATE with its
batch's count in one transaction, so the sweep's own statements, which end many rows
at once and know nothing of batches, then find them gone. Runs only when the queue has
an expired lease (the sweep's own condition), never on a claim that finds none."""
from __future__ import annotations

from typing import Any, Callable

import peewee

from caravel_lite.retry import retrying
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import Failure, JobState
from caravel_lite.workflows.follow import FollowUps
from caravel_lite.workflows.membership import MARKER, Role, membership_of

__all__ = ["ExpiredMembers"]

LEASED = JobState.LEASED.value
DEAD = JobState.DEAD_LETTER.value
CANCELLED = JobState.CANCELLED.value


class ExpiredMembers:
    def __init__(self, db: peewee.Database, dialect: Any,
                 followups: Callable[[], FollowUps]) -> None:
        p = db.param
        t = JOBS_TABLE
        self.db = db
        self.dialect = dialect
        self._followups = followups
        expired = f"state = '{LEASED}' AND lease_expires_at <= {p}"
        # params: queue, now, pattern
        self._find = (f"SELECT id, job_options, attempts, max_attempts, cancel_requested_at "
                      f"FROM {t} WHERE queue = {p} AND {expired} AND job_options LIKE {p}")
        # params: now (finished), now (updated), id, now
        self._cancel = (f"UPDATE {t} SET state = '{CANCELLED}', lease_token = NULL, "
                        f"lease_expires_at = NULL, finished_at = {p}, updated_at = {p} "
                        f"WHERE id = {p} AND {expired} AND cancel_requested_at IS NOT NULL")
        self._dead = (f"UPDATE {t} SET state = '{DEAD}', "
                      f"last_failure = '{Failure.ATTEMPTS_EXHAUSTED.value}', "
                      f"lease_token = NULL, lease_expires_at = NULL, finished_at = {p}, "
                      f"updated_at = {p} WHERE id = {p} AND {expired} "
                      f"AND attempts >= max_attempts AND cancel_requested_at IS NULL")

    def finish(self, queue_name: str, now_ms: int) -> int:
        """End the queue's expired batch members that the sweep would end; how many."""
        ended = 0
        rows = self.db.execute_sql(self._find, (queue_name, now_ms,
                                                f"%{MARKER}%")).fetchall()
        for job_id, options, attempts, max_attempts, requested in rows:
            member = membership_of(options)
            if member is None or member.role is not Role.MEMBER:
                continue
            if requested is not None:
                ended += self._end(str(job_id), self._cancel, CANCELLED, member, now_ms)
            elif int(attempts) >= int(max_attempts):
                ended += self._end(str(job_id), self._dead, DEAD, member, now_ms)
        return ended

    def _end(self, job_id: str, sql: str, state: str, member: Any, now_ms: int) -> bool:
        followups = self._followups()

        def once() -> bool:
            with self.dialect.write_transaction(self.db):
                if self.db.execute_sql(sql, (now_ms, now_ms, job_id, now_ms)).rowcount == 1:
                    followups.after(member, job_id, state, now_ms)
                    return True
            return False
        # A lost reply leaves the row for the sweep that follows, or the next one:
        # then either this transaction committed (the row is final) or it did not.
        return retrying(self.dialect, self.db, once)
