"""What a chain's or batch's job finishing makes due, written in the same transaction
as the fenced transition that finished it (the caller opens it and runs
:meth:`FollowUps.after` only once that transition matched its row).

- A chain step COMPLETED: the chain counts it, and its next step goes from HELD to
  PENDING. A step that fails for good (dead-lettered, discarded, cancelled) makes
  nothing due: the steps after it stay HELD until the step is replayed and completes,
  or the chain is cancelled.
- A batch member final (completed, dead-lettered, discarded, cancelled): the batch
  counts it with one conditional UPDATE of its row, which also serialises the members
  finishing at once (each waits for the row's lock and reads the count the previous
  one committed). The first failure makes ``on_failure`` due; the member that makes
  the count reach the total closes the batch and makes ``on_complete`` due, and
  ``on_success`` if none failed (the callbacks the outcome rules out end CANCELLED).
  Every callback is a job written HELD with the batch, and made due by a transition
  fenced on HELD, so it runs once however the transactions interleave; a transaction
  that rolls back (a crash, a lost lease) counted nothing and made nothing due.

Replays (the rule): a batch counts each member once, at its first final state. A
replayed member runs again, but whatever it ends in is not counted again, and a closed
batch never reopens: its callbacks were decided once. A replayed chain step that
completes releases the next step, which is how a held chain resumes.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import peewee

from caravel_lite.values import JobState
from caravel_lite.workflows.membership import Membership, Role
from caravel_lite.workflows.statements import WorkflowStatements

__all__ = ["FollowUps"]

COMPLETED = JobState.COMPLETED.value


class FollowUps:
    def __init__(self, db: peewee.Database) -> None:
        self.db = db
        self.sql = WorkflowStatements(db)

    def _run(self, sql: str, params: Tuple[Any, ...]) -> Any:
        return self.db.execute_sql(sql, params)

    def applies(self, member: Optional[Membership], state: str) -> bool:
        """Whether a job ending in ``state`` has anything to do here (a chain step only
        when it completed; a callback never)."""
        if member is None or member.role is Role.CALLBACK:
            return False
        return member.role is Role.MEMBER or state == COMPLETED

    def after(self, member: Membership, job_id: str, state: str, now_ms: int) -> None:
        """In the transaction that just moved ``job_id`` to the final ``state``."""
        if member.role is Role.STEP:
            self._step_completed(member, now_ms)
        elif member.role is Role.MEMBER:
            self._member_final(member, job_id, state != COMPLETED, now_ms)

    def _step_completed(self, member: Membership, now_ms: int) -> None:
        run = self._run
        run(self.sql.count_step, (now_ms, member.workflow_id))
        if member.next_id is not None:
            run(self.sql.release, (now_ms, member.next_id))

    def _member_final(self, member: Membership, job_id: str, failed: bool,
                      now_ms: int) -> None:
        run = self._run
        replays = run(self.sql.replays, (job_id,)).fetchone()
        if replays is None or int(replays[0]) > 0:
            return  # counted at its first final state (the rule above)
        self.count_member(member, failed, now_ms)

    def count_member(self, member: Membership, failed: bool, now_ms: int) -> None:
        """Count a batch member final (its caller knows it was not counted before: a
        first final state, or a removal before one), in the open transaction, and make
        due or rule out the callbacks the count decides."""
        run = self._run
        if run(self.sql.count_member, (now_ms, int(failed), member.workflow_id)).rowcount != 1:
            return  # closed already (a member counted through another path), or gone
        row = run(self.sql.tally, (member.workflow_id,)).fetchone()
        total, finished, failures, on_complete, on_success, on_failure = row
        if failed and int(failures) == 1 and on_failure is not None:
            run(self.sql.release, (now_ms, on_failure))
        if int(finished) < int(total):
            return
        if on_complete is not None:
            run(self.sql.release, (now_ms, on_complete))
        if int(failures) == 0:
            if on_success is not None:
                run(self.sql.release, (now_ms, on_success))
            if on_failure is not None:
                run(self.sql.rule_out, (now_ms, now_ms, on_failure))
        elif on_success is not None:
            run(self.sql.rule_out, (now_ms, now_ms, on_success))
