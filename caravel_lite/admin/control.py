"""The operator's controls during an incident, mixed into
:class:`~caravel_lite.QueueAdmin`: cancel jobs of any tenant
(:mod:`caravel_lite.cancel`), pause and resume queues (:mod:`caravel_lite.pausing`),
and the workers' heartbeats with the jobs each runs (:mod:`caravel_lite.heartbeats`).
"""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import (TYPE_CHECKING, Any, Callable, Dict, Optional, Sequence, Set, Tuple,
                    Union)

import peewee

from caravel_lite import validation
from caravel_lite.admin.filters import Instant, JobFilter
from caravel_lite.cancel import CancelStatements, cancel_one
from caravel_lite.clock import floor_ms, from_ms
from caravel_lite.dialect import dialect_of
from caravel_lite.heartbeats import Heartbeats, WorkerInfo
from caravel_lite.observability import Telemetry, logger
from caravel_lite.pausing import Pauses
from caravel_lite.values import Failure, JobState
from caravel_lite.logfields import fields
from caravel_lite.workflows.operator import end_member

__all__ = ["AdminControl", "CANCELLABLE"]

PENDING = JobState.PENDING.value
CANCELLED = JobState.CANCELLED.value

CANCELLABLE = (JobState.PENDING, JobState.LEASED)
# What the listings and the job view read beside their own columns (migration 0009).
CONTROL_COLUMNS = ", progress_done, progress_total, progress_at, cancel_requested_at"


def control_fields(row: Sequence[Any], start: int) -> Dict[str, Any]:
    """The JobSummary fields of CONTROL_COLUMNS, read from ``row[start:]``."""
    done, total, at, requested = row[start:start + 4]
    return dict(progress_done=None if done is None else int(done),
                progress_total=None if total is None else int(total),
                progress_at=_maybe_ms(at), cancel_requested_at=_maybe_ms(requested))


def _maybe_ms(value: Any) -> Optional[datetime]:
    return from_ms(int(value)) if value is not None else None


class AdminControl:
    """cancel, cancel_many, pause, resume, paused and workers of QueueAdmin."""

    db: peewee.Database
    _telemetry: Telemetry

    if TYPE_CHECKING:  # QueueAdmin's own helpers
        def _now_us(self) -> int: ...

        def _bulk_filter(self, verb: str, allowed: Tuple[JobState, ...], queue: Optional[str],
                         state: Union[JobState, str, None], tenant_id: Optional[str],
                         wire_name: Optional[str], failure: Union[Failure, str, None],
                         since: Optional[Instant], until: Optional[Instant]) -> JobFilter: ...

        @staticmethod
        def _check_scope(verb: str, noun: str, everything: object,
                         filters: Sequence[object]) -> None: ...

        def _update_matching(self, f: JobFilter, template: str, stamps: int,
                             counter: Callable[[str, int], None],
                             ending: Optional[str] = None) -> int: ...

        def _count_matching(self, f: JobFilter) -> int: ...

    _control_sql: Optional[CancelStatements] = None

    @property
    def _cancels(self) -> CancelStatements:
        if self._control_sql is None:
            self._control_sql = CancelStatements(self.db)
        return self._control_sql

    # -- cancel ----------------------------------------------------------------------

    def cancel(self, job_id: Union[uuid.UUID, str]) -> bool:
        """Cancel one job of any tenant: a PENDING or delayed job becomes CANCELLED at
        once; a LEASED one gets a cancel request, which the worker running it sees
        within a second (its handler is told to stop through ``ctx.cancelled``) and
        ends CANCELLED whatever the handler then does; a job whose worker is gone ends
        CANCELLED when its lease expires, never run again. True when the job is
        cancelled or will be; False for a finished job or an unknown id. May be
        repeated; a lost reply is settled by reading the row back."""
        ident = validation.check_uuid("job_id", job_id)
        sql = self._cancels
        row = self.db.execute_sql(sql.settled, (ident,)).fetchone()
        if row is None:
            return False
        now_ms = floor_ms(self._now_us())
        dialect = dialect_of(self.db)
        # A pending batch member is cancelled with its batch's count.
        done = row[0] == PENDING and bool(end_member(
            self.db, dialect, row[4], ident, sql.pending_member, (now_ms, now_ms, ident),
            CANCELLED, now_ms))
        done = done or cancel_one(self.db, dialect, sql.one, sql.settled,
                                  [now_ms, now_ms, now_ms, ident], ident)
        if done:
            self._telemetry.count("cancel_requested", row[2])
            logger.info("job %s cancelled by an operator", ident,
                        extra=fields(job_id=ident, reason="cancel"))
        return done

    def cancel_many(self, queue: Optional[str] = None,
                    state: Union[JobState, str, None] = None,
                    tenant_id: Optional[str] = None, wire_name: Optional[str] = None,
                    failure: Union[Failure, str, None] = None,
                    since: Optional[Instant] = None, until: Optional[Instant] = None, *,
                    dry_run: bool = False, everything: bool = False) -> int:
        """Cancel every PENDING and LEASED job matching the filters (those of
        :meth:`jobs`; ``state`` may be PENDING or LEASED to take only those), as
        :meth:`cancel` does one. At least one filter is required, or
        ``everything=True`` (else ``InvalidField("everything")``, nothing changed).
        Returns how many were cancelled or given a request, or with ``dry_run`` how
        many match now. Batches of 500, each one UPDATE that checks the state and
        every filter again: a job that finished meanwhile is left alone and not
        counted."""
        self._check_scope("cancel", "pending or leased job", everything,
                          (queue, state, tenant_id, wire_name, failure, since, until))
        # One filter per state: each is read through its state's index.
        states = CANCELLABLE if state is None else (state,)
        filters = [self._bulk_filter("cancelled", CANCELLABLE, queue, one, tenant_id,
                                     wire_name, failure, since, until) for one in states]
        if dry_run:
            return sum(self._count_matching(f) for f in filters)
        # Pending batch members are cancelled with their batch's count; leased ones
        # only get a request, and are counted when they end.
        total = sum(self._update_matching(
            f, self._cancels.many, 3,
            lambda queue_name, n: self._telemetry.count("cancel_requested", queue_name, n),
            CANCELLED if f.state is JobState.PENDING else None)
            for f in filters)
        if total:
            logger.info("cancelled %d job(s) (leased ones by request)", total,
                        extra=fields(count=total, reason="cancel"))
        return total

    # -- pause and resume ----------------------------------------------------------------

    def pause(self, queue_name: str) -> bool:
        """Pause ``queue_name``: workers stop claiming from it within about a second
        (2 s at most); running jobs finish, enqueue still works, workers on other queues
        too keep claiming from those. True if this call paused it (False: it already
        was). May be repeated."""
        done = Pauses(self.db).pause(queue_name, floor_ms(self._now_us()))
        if done:
            logger.info("queue %s paused by an operator", queue_name,
                        extra=fields(queue=queue_name, reason="pause"))
        return done

    def resume(self, queue_name: str) -> bool:
        """Resume a paused queue: workers claim from it again within about a second
        (2 s at most). True if it was paused. May be repeated."""
        done = Pauses(self.db).resume(queue_name)
        if done:
            logger.info("queue %s resumed by an operator", queue_name,
                        extra=fields(queue=queue_name, reason="resume"))
        return done

    def paused(self) -> Set[str]:
        """The names of the paused queues."""
        return Pauses(self.db).paused()

    # -- workers -----------------------------------------------------------------------

    def _holder(self, state: JobState, job_id: str) -> Optional[str]:
        """The id of the running worker (one with a heartbeat row) holding a leased
        job's lease: its lease token begins with that id."""
        if state is not JobState.LEASED:
            return None
        return Heartbeats(self.db).holder(job_id)

    def workers(self) -> Tuple[WorkerInfo, ...]:
        """Every worker with a heartbeat row, oldest first: id, host, pid, queues,
        concurrency, library version, started, last seen, jobs running, whether it is
        ``lost`` (no beat for 3 beats: 15 s) and the leased jobs it holds (with since
        when). Rows lost for more than a day are deleted here."""
        return Heartbeats(self.db).read(floor_ms(self._now_us()))
