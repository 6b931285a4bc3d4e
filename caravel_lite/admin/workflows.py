"""Operator views of chains and batches (mixed into :class:`QueueAdmin`): one page of a
queue's chains or batches, newest first, each with its jobs counted by state, and one
workflow by id. Any tenant."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Optional, Tuple, Union

import peewee

from caravel_lite import validation
from caravel_lite.workflows.calls import summary_of
from caravel_lite.workflows.statements import WorkflowStatements
from caravel_lite.workflows.values import WorkflowKind, WorkflowSummary

__all__ = ["WorkflowPage", "WorkflowViews"]


@dataclass(frozen=True)
class WorkflowPage:
    """Newest first; ``next_cursor`` (the last one's id) asks for the page after."""

    workflows: Tuple[WorkflowSummary, ...]
    next_cursor: Optional[str]


class WorkflowViews:
    db: peewee.Database
    _workflow_sql: Optional[WorkflowStatements] = None

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
