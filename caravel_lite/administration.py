"""The application's tenant-scoped administration, mixed into DatabaseQueue: status,
replay, counts, peek, delete, prune. (Operators' views across every tenant are
:class:`caravel_lite.QueueAdmin`.)

These run through Peewee's query builder on the runtime model (they are not hot
paths). Lookups by tenant are exact: the columns use an exact collation and the result
is checked again in Python.
"""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Union

import peewee
from peewee import Case, fn

from caravel_lite import validation
from caravel_lite.clock import Clock, floor_ms, from_ms, now_micros
from caravel_lite.schema import bind_models
from caravel_lite.values import (Failure, JobState, JobStatus, PeekedJob, Priority,
                                 QueueCounts)

if TYPE_CHECKING:
    from caravel_lite.admin.retention import Pruner
    from caravel_lite.observability import Telemetry

# The final states a replay makes due again.
REPLAYABLE = (JobState.DEAD_LETTER.value, JobState.CANCELLED.value)


class Administration:
    """Tenant-scoped inspection and administration mixed into :class:`DatabaseQueue`."""

    # Set by DatabaseQueue.__init__; declared here for type checkers.
    db: peewee.Database
    clock: Clock
    telemetry: Telemetry

    def __init__(self) -> None:
        self._jobs, _ = bind_models(self.db)
        self._pruner_made: Optional[Pruner] = None

    def _pruner(self) -> Pruner:
        """The paced deleter of delete() and prune(), made on first use: importing
        caravel_lite.admin (where retention lives) was about a fifth of the
        package's import time, which a process that never deletes should not pay at its start."""
        if self._pruner_made is None:
            from caravel_lite.admin import retention

            self._pruner_made = retention.Pruner(self.db, clock=self.clock)
        return self._pruner_made

    def _now_ms(self) -> int:
        return floor_ms(now_micros(self.clock))

    def _scoped(self, job_id: object, queue: str, tenant_id: str) -> Any:  # a condition
        validation.check_queue(queue)
        validation.check_identity("tenant_id", tenant_id)
        Job = self._jobs
        return (Job.id == validation.check_uuid("job_id", job_id)) & (Job.queue == queue) & (Job.tenant_id == tenant_id)

    def status(self, job_id: Union[uuid.UUID, str], queue: str,
               tenant_id: str) -> Optional[JobStatus]:
        """The job's state, or None for an unknown id, another queue or another tenant.
        The tenant must match exactly, case and trailing spaces included."""
        Job = self._jobs
        row = Job.select().where(self._scoped(job_id, queue, tenant_id)).first()
        if row is None or row.tenant_id != tenant_id or row.queue != queue:
            return None
        return JobStatus(uuid.UUID(row.id), row.queue, row.tenant_id, JobState(row.state),
                         row.attempts, row.max_attempts, from_ms(row.available_at),
                         Failure(row.last_failure) if row.last_failure else None,
                         row.replay_count, Priority(row.priority))

    def replay(self, job_id: Union[uuid.UUID, str], queue: str, tenant_id: str) -> bool:
        """Make a DEAD_LETTER (or CANCELLED) job due now again: same id and payload,
        attempts reset, failure and cancel request cleared, replay_count + 1. False for
        any other state or tenant, and for
        the loser of two simultaneous replays. Replay can repeat side effects."""
        Job = self._jobs
        now_ms = self._now_ms()
        changed = (Job.update(state=JobState.PENDING.value, attempts=0, available_at=now_ms,
                              last_failure=None, finished_at=None,
                              replay_count=Job.replay_count + 1, updated_at=now_ms,
                              cancel_requested_at=None)
                   .where(self._scoped(job_id, queue, tenant_id)
                          & Job.state.in_(REPLAYABLE))
                   .execute())
        if changed:
            self.telemetry.count("replayed", queue)
        return int(changed) == 1

    def counts(self, queue: str, tenant_id: Optional[str] = None) -> QueueCounts:
        """Counts by category for ``queue`` (and only ``tenant_id``'s jobs when given),
        from one query, so the figures are consistent with each other. Never reads
        payloads or keys."""
        validation.check_queue(queue)
        Job = self._jobs
        now_ms = self._now_ms()
        due = Job.available_at <= now_ms
        live = Job.lease_expires_at > now_ms

        def total(condition: Any) -> peewee.Node:
            return fn.COALESCE(fn.SUM(Case(None, [(condition, 1)], 0)), 0)

        where = Job.queue == queue
        if tenant_id is not None:
            validation.check_identity("tenant_id", tenant_id)
            where &= Job.tenant_id == tenant_id
        pending = Job.state == JobState.PENDING.value
        leased = Job.state == JobState.LEASED.value
        row = (Job.select(total(pending & due), total(pending & ~due), total(leased & live),
                          total(leased & ~live),
                          total(Job.state == JobState.DEAD_LETTER.value),
                          total(Job.state == JobState.COMPLETED.value),
                          total(Job.state == JobState.CANCELLED.value),
                          total(Job.state == JobState.HELD.value))
               .where(where).tuples().get())
        return QueueCounts(from_ms(now_ms), *(int(value) for value in row))

    def size(self, queue: str) -> int:
        """How many jobs of ``queue`` are due now and waiting (the ready count)."""
        validation.check_queue(queue)
        Job = self._jobs
        return int(Job.select().where((Job.queue == queue)
                                      & (Job.state == JobState.PENDING.value)
                                      & (Job.available_at <= self._now_ms())).count())

    def peek(self, queue: str) -> Optional[PeekedJob]:
        """The job a claim would take next, without claiming it (expired leases that a
        claim would first make claimable are not shown)."""
        validation.check_queue(queue)
        Job = self._jobs
        row = (Job.select(Job.id, Job.tenant_id, Job.wire_name, Job.state, Job.attempts,
                          Job.available_at, Job.priority)
               .where((Job.queue == queue) & (Job.state == JobState.PENDING.value)
                      & (Job.available_at <= self._now_ms()))
               .order_by(Job.priority, Job.available_at, Job.enqueued_at, Job.id)
               .first())
        if row is None:
            return None
        return PeekedJob(uuid.UUID(row.id), row.tenant_id, row.wire_name, JobState(row.state),
                         row.attempts, from_ms(row.available_at), Priority(row.priority))

    def queues(self) -> List[str]:
        """Names of the queues that have at least one job, sorted."""
        Job = self._jobs
        return sorted({name for (name,) in Job.select(Job.queue).distinct().tuples()})

    def delete(self, job_id: Union[uuid.UUID, str], queue: str, tenant_id: str) -> bool:
        """Delete one job that is not leased, with its failure history. Its idempotency
        key becomes free again."""
        ident = validation.check_uuid("job_id", job_id)
        validation.check_queue(queue)
        validation.check_identity("tenant_id", tenant_id)
        p = self.db.param
        # Exact tenant and queue: the columns compare exactly, as everywhere.
        return self._pruner().delete(ident, f"queue = {p} AND tenant_id = {p}",
                                   (queue, tenant_id))

    def prune(self, older_than: Union[timedelta, datetime],
              states: Iterable[JobState] = (JobState.COMPLETED, JobState.DEAD_LETTER),
              queue: Optional[str] = None) -> int:
        """Delete finished jobs (COMPLETED and/or DEAD_LETTER) that finished before
        ``older_than`` (a datetime, or a timedelta before now), with their failure
        history, in paced batches of the database's size (100 on SQLite, 1000
        elsewhere; see :mod:`caravel_lite.admin.retention`).
        Nothing is ever pruned automatically. A pruned job's idempotency key is
        forgotten: the same key can then create a new job."""
        from caravel_lite.admin import retention

        chosen = retention.check_states(states)
        cutoff = retention.cutoff_ms(older_than, now_micros(self.clock))
        return self._pruner().prune(cutoff, chosen, queue)
