"""Jobs of chains and batches removed by a delete or a prune
(:mod:`caravel_lite.admin.retention`), with what their going means for their workflow,
in the transaction that deletes them.

- The plain statement of a delete or prune leaves out every job whose options mark a
  workflow (one more condition on the rows it deletes, no statement more), so plain
  jobs cost what they did. When it deleted fewer rows than it was given it reads back
  those left (as it did before), and hands those of a workflow here.
- Here each of their workflows' rows is locked first (a write that changes nothing),
  in id order, and the jobs are read again under the locks: every removal of a
  workflow's jobs takes its lock, so none runs beside this one, and what the fenced
  DELETEs below find gone went by this transaction, once. Each DELETE checks again
  the state and replay count just read (a job claimed, replayed or finished meanwhile
  is kept) and the caller's condition.
- A batch member removed before it was final (pending or held, never replayed) is
  counted in its batch as failed, as a discarded one is: it never completed, and the
  batch would otherwise never close. One removed after its first final state was
  counted then (a replay is not counted again).
- A chain step removed before it completed ends the HELD steps after it CANCELLED, as
  ``cancel_chain`` would: no replay of it can resume them any more. A completed step
  has released the next one already; removing it changes nothing.
- Once none of a workflow's jobs is left (members or steps, and callbacks), its rows
  in ``caravel_workflows`` and ``caravel_workflow_jobs`` go too: with the lock held,
  two transactions removing its last jobs at once see each other's deletes, so one of
  them finds it empty.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import peewee

from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import JobState
from caravel_lite.workflows.follow import FollowUps
from caravel_lite.workflows.membership import MARKER, Membership, Role, membership_of

__all__ = ["Removal"]

COMPLETED = JobState.COMPLETED.value
FINAL = (COMPLETED, JobState.DEAD_LETTER.value, JobState.CANCELLED.value)
# Ids per statement ruling out the steps after a removed one.
CHUNK = 500
Row = Tuple[str, str, int, Optional[str]]  # id, state, replay_count, job_options


class Removal:
    """The removal of workflow jobs on one database (built on first use)."""

    def __init__(self, db: peewee.Database) -> None:
        self.db = db
        self.followups = FollowUps(db)
        self.sql = self.followups.sql
        p = db.param
        self._read = (f"SELECT id, state, replay_count, job_options FROM {JOBS_TABLE} "
                      f"WHERE id IN ({{marks}})")
        # params: *ids, state, replay_count, *the caller's condition's
        self._delete = (f"DELETE FROM {JOBS_TABLE} WHERE id IN ({{marks}}) AND state = {p} "
                        f"AND replay_count = {p} AND {{condition}}")

    def _run(self, sql: str, params: Sequence[Any]) -> Any:
        return self.db.execute_sql(sql, params)

    def _marks(self, n: int) -> str:
        return ", ".join([self.db.param] * n)

    def delete(self, left: Sequence[Sequence[Any]], condition: str,
               params: Sequence[object], now_ms: int) -> List[str]:
        """In the open transaction: of ``left`` ((id, job_options) of the jobs a plain
        DELETE did not delete), delete those of a workflow that still match
        ``condition`` (``params`` its parameters), with what that means for their
        workflows (this module's rules); the ids deleted."""
        marked = [str(row[0]) for row in left if row[1] is not None and MARKER in row[1]]
        if not marked:
            return []
        workflows = sorted({member.workflow_id for member in
                            (membership_of(row[1]) for row in left) if member is not None})
        for workflow_id in workflows:
            self._run(self.sql.lock, (workflow_id,))
        rows: List[Row] = [(str(r[0]), str(r[1]), int(r[2]), r[3]) for r in self._run(
            self._read.format(marks=self._marks(len(marked))), marked).fetchall()]
        gone = self._delete_fenced(rows, condition, params)
        removed: Dict[str, List[Tuple[Row, Membership]]] = {}
        for row in gone:
            member = membership_of(row[3])
            if member is not None:
                removed.setdefault(member.workflow_id, []).append((row, member))
        for workflow_id in workflows:
            if workflow_id in removed:
                self._after(workflow_id, removed[workflow_id], now_ms)
                self._forget_if_empty(workflow_id)
        return [row[0] for row in gone]

    def _delete_fenced(self, rows: List[Row], condition: str,
                       params: Sequence[object]) -> List[Row]:
        """Delete ``rows`` still in the state and replay count they were read with (and
        matching ``condition``), one statement per pair; the rows that went."""
        groups: Dict[Tuple[str, int], List[Row]] = {}
        for row in rows:
            groups.setdefault((row[1], row[2]), []).append(row)
        gone: List[Row] = []
        for (state, replays), group in groups.items():
            ids = [row[0] for row in group]
            sql = self._delete.format(marks=self._marks(len(ids)), condition=condition)
            deleted = int(self._run(sql, [*ids, state, replays, *params]).rowcount)
            if deleted == len(ids):
                gone += group
            elif deleted:
                kept = {str(r[0]) for r in self._run(self.sql.existing(len(ids)), ids)}
                gone += [row for row in group if row[0] not in kept]
        return gone

    def _after(self, workflow_id: str, removed: List[Tuple[Row, Membership]],
               now_ms: int) -> None:
        """What the removal of these jobs of one workflow means for it."""
        first_unfinished: Optional[int] = None
        steps: Optional[List[str]] = None
        for (ident, state, replays, _), member in removed:
            if member.role is Role.MEMBER and state not in FINAL and replays == 0:
                self.followups.count_member(member, True, now_ms)
            elif member.role is Role.STEP and state != COMPLETED:
                if steps is None:  # the chain's steps in order, read once
                    steps = [str(r[0]) for r in self._run(self.sql.member_ids,
                                                          (workflow_id,)).fetchall()]
                if ident in steps:
                    at = steps.index(ident)
                    first_unfinished = at if first_unfinished is None else min(
                        first_unfinished, at)
        if steps is not None and first_unfinished is not None:
            later = steps[first_unfinished + 1:]
            for start in range(0, len(later), CHUNK):
                chunk = later[start:start + CHUNK]
                self._run(self.sql.rule_out_many(len(chunk)), (now_ms, now_ms, *chunk))

    def _forget_if_empty(self, workflow_id: str) -> None:
        """Delete the workflow's rows when none of its jobs is left (its lock held)."""
        if self._run(self.sql.members_left, (workflow_id,)).fetchone() is not None:
            return
        tally = self._run(self.sql.tally, (workflow_id,)).fetchone()
        if tally is None:
            return
        callbacks = [str(ident) for ident in tally[3:6] if ident is not None]
        if callbacks and self._run(self.sql.existing(len(callbacks)),
                                   callbacks).fetchone() is not None:
            return
        self._run(self.sql.forget_members, (workflow_id,))
        self._run(self.sql.forget, (workflow_id,))
