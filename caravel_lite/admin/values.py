"""The frozen values the operator views return (QueueAdmin). None of them holds a
payload unless it was asked for (``include_payload=True``)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Dict, Iterator, Optional, Tuple

from caravel_lite.values import Failure, JobState, Priority


@dataclass(frozen=True)
class JobSummary:
    """One job as the listing shows it. ``payload`` is None unless asked for.
    ``claimed_at``: when its last attempt began (for a leased job: since when it
    runs). ``last_error_type``: the exception type of its last failure when the
    failure history recorded one for it (None when the last failure raised nothing,
    a lease expired, or it has none)."""

    job_id: uuid.UUID
    queue_name: str
    tenant_id: str
    wire_name: str
    state: JobState
    priority: Priority
    attempts: int
    max_attempts: int
    available_at: datetime
    enqueued_at: datetime
    finished_at: Optional[datetime]
    lease_expires_at: Optional[datetime]
    last_failure: Optional[Failure]
    replay_count: int
    payload: Optional[str] = field(default=None, repr=False)
    claimed_at: Optional[datetime] = None
    last_error_type: Optional[str] = None
    # Migration 0009: the progress its handler last reported (ctx.progress) and when,
    # and when an operator asked a leased job to stop (it then ends CANCELLED).
    progress_done: Optional[int] = None
    progress_total: Optional[int] = None
    progress_at: Optional[datetime] = None
    cancel_requested_at: Optional[datetime] = None


@dataclass(frozen=True)
class JobPage:
    """One page of :meth:`QueueAdmin.jobs`, newest first. ``next_cursor`` is passed as
    ``after=`` for the next page; None on the last page."""

    jobs: Tuple[JobSummary, ...]
    next_cursor: Optional[str]

    def __iter__(self) -> Iterator[JobSummary]:
        return iter(self.jobs)

    def __len__(self) -> int:
        return len(self.jobs)


@dataclass(frozen=True)
class FailureRecord:
    """One failed attempt: when, which attempt (``replays``: how many times the job had
    been replayed then; attempts restart at 1 after a replay), the category, the
    exception's qualified type name and the site it was raised at
    (``module:function:line``), and the application's ``describe_failure`` text if it
    gave one. Never the exception's message."""

    seq: int
    failed_at: datetime
    attempt: int
    replays: int
    category: Failure
    error_type: Optional[str]
    site: Optional[str]
    description: Optional[str] = None
    # Only when the application records errors (QueueOptions(record_errors=True)): the
    # (redacted) message and a short traceback, one "file:line in function" per line.
    message: Optional[str] = None
    trace: Optional[str] = None


@dataclass(frozen=True)
class JobDetail(JobSummary):
    """A job's envelope and its failure history (oldest first, the last 20 kept)."""

    # A debounced job's: the id of the enqueue call that last wrote it
    # (caravel_lite.debounce).
    idempotency_key: Optional[str] = None
    updated_at: Optional[datetime] = None
    renewals: int = 0
    failures: Tuple[FailureRecord, ...] = ()
    # A completed job's kept result, as stored (JSON text): like the payload, None
    # unless asked for (include_payload=True).
    result: Optional[str] = field(default=None, repr=False)
    # The running worker holding its lease (QueueAdmin.workers), when leased by one.
    worker_id: Optional[str] = None
    # The chain or batch it belongs to (caravel_lite.workflows): its id, "chain" or
    # "batch", and the job's role there ("step", "member" or "callback").
    workflow_id: Optional[uuid.UUID] = None
    workflow_kind: Optional[str] = None
    workflow_role: Optional[str] = None


def workflow_fields(options: Optional[str]) -> Dict[str, Any]:
    """The JobDetail fields naming a job's chain or batch, from its stored options."""
    from caravel_lite.workflows.membership import Role, membership_of

    member = membership_of(options)
    if member is None:
        return {}
    kind = "chain" if member.role is Role.STEP else "batch"
    return dict(workflow_id=uuid.UUID(member.workflow_id), workflow_kind=kind,
                workflow_role=member.role.value)


@dataclass(frozen=True)
class QueueSummary:
    """One queue's jobs now: waiting and due (``ready``), waiting for their due time
    (``delayed``), leased and live, leased and expired, dead letters; jobs completed
    and attempts failed since the window's start; when the oldest ready job became
    due."""

    queue_name: str
    ready: int
    delayed: int
    leased: int
    expired: int
    dead_letter: int
    completed: int
    failed: int
    oldest_ready_at: Optional[datetime]
    oldest_ready_age: Optional[timedelta]


@dataclass(frozen=True)
class TenantCounts:
    """One tenant's unfinished and dead-lettered jobs in one queue."""

    queue_name: str
    tenant_id: str
    ready: int
    delayed: int
    leased: int
    expired: int
    dead_letter: int


@dataclass(frozen=True)
class MinuteCount:
    """Jobs completed, attempts failed and jobs dead-lettered in one minute."""

    minute: datetime
    completed: int
    failed: int
    dead_lettered: int


@dataclass(frozen=True)
class QueueStats:
    """What :meth:`QueueAdmin.stats` observed at ``observed_at`` over the window since
    ``since``. Pickup latency (from due time to claim) is taken from the most recent
    finished jobs of the window (at most ``pickup_sample`` of them); None when the
    window has none."""

    observed_at: datetime
    since: datetime
    queues: Tuple[QueueSummary, ...]
    per_minute: Tuple[MinuteCount, ...]
    pickup_p50: Optional[timedelta]
    pickup_p95: Optional[timedelta]
    pickup_sample: int
    tenants: Tuple[TenantCounts, ...] = ()


@dataclass(frozen=True)
class PruneProgress:
    """Where a prune is: jobs deleted so far, of ``total`` matching when it began
    (jobs finishing meanwhile are not counted), and batches written."""

    deleted: int
    total: int
    batches: int
