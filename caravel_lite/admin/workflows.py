"""Operator views of chains and batches (mixed into :class:`QueueAdmin`): one page of a
queue's chains or batches, newest first, each with its jobs counted by state, and one
workflow by id; and the operator's ``cancel_chain``. Any tenant."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Tuple, Union

import peewee

from caravel_lite import validation
from caravel_lite.clock import floor_ms
from caravel_lite.dialect import dialect_of
from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.retry import retrying
from caravel_lite.values import JobState
from caravel_lite.workflows.calls import summary_of
from caravel_lite.workflows.statements import WorkflowStatements
from caravel_lite.workflows.values import WorkflowKind, WorkflowSummary

# The steps a chain's cancel reaches: waiting, running (asked to stop), held.
LEFT = (JobState.PENDING.value, JobState.LEASED.value, JobState.HELD.value)

__all__ = ["WorkflowPage", "WorkflowViews"]


@dataclass(frozen=True)
class WorkflowPage:
    """Newest first; ``next_cursor`` (the last one's id) asks for the page after."""

    workflows: Tuple[WorkflowSummary, ...]
    next_cursor: Optional[str]


class WorkflowViews:
    db: peewee.Database
    _workflow_sql: Optional[WorkflowStatements] = None

    if TYPE_CHECKING:  # QueueAdmin's
        def _now_us(self) -> int: ...

        def cancel(self, job_id: Union[uuid.UUID, str]) -> bool: ...

    @property
    def _wsql(self) -> WorkflowStatements:
        if self._workflow_sql is None:
            self._workflow_sql = WorkflowStatements(self.db)
        return self._workflow_sql

    def _page(self, kind: WorkflowKind, queue: str, limit: int,
              after: Optional[str]) -> WorkflowPage:
        validation.check_queue(queue)
        validation.check_int("limit", limit, 1, 200)
        sql = self._wsql
        if after is None:
            rows = self.db.execute_sql(sql.listing, (queue, kind.value, limit)).fetchall()
        else:
            cursor = validation.check_uuid("after", after)
            rows = self.db.execute_sql(sql.listing_before,
                                       (queue, kind.value, cursor, limit)).fetchall()
        found = tuple(summary_of(row, sql.job_counts(self.db, str(row[0]))) for row in rows)
        last = str(found[-1].workflow_id) if len(found) == limit else None
        return WorkflowPage(found, last)

    def batches(self, queue: str, limit: int = 50,
                after: Optional[str] = None) -> WorkflowPage:
        """One page of ``queue``'s batches, newest first, each with its jobs by state,
        its count of finished and failed jobs, its callbacks and when it closed."""
        return self._page(WorkflowKind.BATCH, queue, limit, after)

    def chains(self, queue: str, limit: int = 50,
               after: Optional[str] = None) -> WorkflowPage:
        """One page of ``queue``'s chains, newest first, each with its steps by state
        (``held``: waiting for the step before) and its completed steps."""
        return self._page(WorkflowKind.CHAIN, queue, limit, after)

    def workflow(self, workflow_id: Union[uuid.UUID, str]) -> Optional[WorkflowSummary]:
        """One chain or batch by id (any tenant), None for an unknown id."""
        ident = validation.check_uuid("workflow_id", workflow_id)
        row = self.db.execute_sql(self._wsql.summary, (ident,)).fetchone()
        return None if row is None else summary_of(row, self._wsql.job_counts(self.db, ident))

    def cancel_chain(self, chain_id: Union[uuid.UUID, str], *, dry_run: bool = False) -> int:
        """Cancel what is left of a chain of any tenant, as
        ``DatabaseQueue.cancel_chain`` does for one: its steps front to back, each as
        :meth:`cancel` cancels a job (pending: cancelled at once; running: a cancel
        request its worker honours), then, if held, ended CANCELLED (a step that
        completes meanwhile releases the next, which is then reached as pending).
        Returns how many steps were cancelled or asked to stop, or with ``dry_run``
        how many are pending, running or held now (nothing changed); 0 for a finished
        chain, a batch's id or an unknown id. May be repeated."""
        ident = validation.check_uuid("chain_id", chain_id)
        sql = self._wsql
        row = self.db.execute_sql(sql.summary, (ident,)).fetchone()
        if row is None or row[1] != WorkflowKind.CHAIN.value:
            return 0
        if dry_run:
            counts = sql.job_counts(self.db, ident)
            return sum(counts.get(state, 0) for state in LEFT)
        dialect = dialect_of(self.db)
        cancelled = 0
        for (step,) in self.db.execute_sql(sql.member_ids, (ident,)).fetchall():
            step = str(step)
            cancelled += int(self.cancel(step))
            now_ms = floor_ms(self._now_us())
            cancelled += retrying(dialect, self.db, lambda: int(self.db.execute_sql(
                sql.rule_out, (now_ms, now_ms, step)).rowcount))
        if cancelled:
            logger.info("chain %s cancelled by an operator: %d step(s)", ident, cancelled,
                        extra=fields(chain_id=ident, count=cancelled, reason="cancel"))
        return cancelled
