"""The queue's vocabulary: states, failure categories, priorities and the frozen values
that cross the public API."""
from __future__ import annotations

import enum
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Optional, Tuple


class JobState(str, enum.Enum):
    """Where a job is in its life. Stored as the value's text."""

    PENDING = "pending"
    LEASED = "leased"
    COMPLETED = "completed"
    DEAD_LETTER = "dead_letter"


class Failure(str, enum.Enum):
    """Why an attempt did not complete. Only this category is ever stored, never a
    message, traceback or payload."""

    HANDLER_FAILED = "handler_failed"
    INVALID_PAYLOAD = "invalid_payload"
    UNKNOWN_JOB_TYPE = "unknown_job_type"
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    LEASE_EXPIRED = "lease_expired"
    # The handler raised caravel_lite.Discard: retrying cannot help, dead-lettered at once.
    DISCARDED = "discarded"


class Priority(enum.IntEnum):
    """Claim order: a lower value is claimed first."""

    CRITICAL = 0
    HIGH = 1
    NORMAL = 2
    LOW = 3


class Cancelled(Exception):
    """Raised by :meth:`JobContext.raise_if_cancelled` once the job must stop."""


@dataclass(frozen=True)
class Dispatch:
    """Where and how to enqueue one job. Validated by the queue before any SQL runs."""

    queue: str
    tenant_id: str
    idempotency_key: Optional[str] = None
    not_before: Optional[datetime] = None
    priority: Priority = Priority.NORMAL
    # Jobs of one queue sharing this key are leased at most concurrency_limit at once
    # (the job type's, else QueueOptions'): caravel_lite.limits.
    concurrency_key: Optional[str] = None


@dataclass(frozen=True)
class EnqueueResult:
    job_id: uuid.UUID
    already_enqueued: bool


@dataclass(frozen=True)
class JobContext:
    """What a handler knows about the job it runs.

    ``tenant_id`` is the tenant stored with the job by the trusted caller; scope data
    access by it, never by a tenant found inside the payload. ``cancelled`` is set when
    the lease runs out, ownership is lost or shutdown is requested.
    """

    job_id: uuid.UUID
    queue: str
    tenant_id: str
    attempt: int
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Cancelled` if the job must stop now."""
        if self.cancelled.is_set():
            raise Cancelled(f"job {self.job_id} was cancelled")


@dataclass(frozen=True)
class QueueLease:
    """A claim on one job. Only the holder of the current lease can renew, complete or
    fail it; every operation on a stale lease returns False/None and changes nothing."""

    job_id: uuid.UUID
    attempt: int
    expires_at: datetime
    context: JobContext
    wire_name: str = field(repr=False)
    payload: str = field(repr=False)
    # Internal fencing and bookkeeping: the random token proves ownership, the claim
    # start bounds renewals by max_lease_lifetime.
    _token: str = field(repr=False, default="")
    _claimed_at_us: int = field(repr=False, default=0)
    _max_attempts: int = field(repr=False, default=1)
    # The id as the database stores it (the claim read it so); every acknowledgement
    # names the row by it, several times per job in a batch.
    _key: str = field(repr=False, compare=False, default="")

    def _id_text(self) -> str:
        return self._key or str(self.job_id)


@dataclass(frozen=True)
class ClaimBatch:
    """What one claim got: ``leases``, best first, and whether it lost every race.

    ``contended`` is True when due jobs were there but another claimer took every one
    of them first (only the portable claim path, on servers without SKIP LOCKED, can
    lose a race that way); an empty batch with ``contended`` False means nothing was
    free to claim. A worker that sees ``contended`` may claim again at once instead of
    waiting for its poll interval.
    """

    leases: Tuple[QueueLease, ...]
    contended: bool
    # Due jobs were held back by a concurrency or rate limit (caravel_lite.limits): a
    # caller may claim again once one of its own limited jobs ends.
    held_back: bool = False


@dataclass(frozen=True)
class JobStatus:
    job_id: uuid.UUID
    queue: str
    tenant_id: str
    state: JobState
    attempts: int
    max_attempts: int
    available_at: datetime
    last_failure: Optional[Failure]
    replay_count: int
    priority: Priority


@dataclass(frozen=True)
class QueueCounts:
    observed_at: datetime
    ready: int
    delayed: int
    active_leases: int
    expired_leases: int
    dead_letter: int
    completed: int


@dataclass(frozen=True)
class PeekedJob:
    """The job a claim would take next, without its payload."""

    job_id: uuid.UUID
    tenant_id: str
    wire_name: str
    state: JobState
    attempts: int
    available_at: datetime
    priority: Priority
