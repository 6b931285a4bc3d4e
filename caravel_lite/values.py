"""The queue's vocabulary: states, failure categories, priorities and the frozen values
that cross the public API."""
from __future__ import annotations

import enum
import threading
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ContextManager, Optional, Tuple

from caravel_lite.flags import LazyEvent

if TYPE_CHECKING:
    import peewee


class JobState(str, enum.Enum):
    """Where a job is in its life. Stored as the value's text."""

    PENDING = "pending"
    LEASED = "leased"
    COMPLETED = "completed"
    DEAD_LETTER = "dead_letter"
    # Stopped by an operator (caravel_lite.cancel): final, replayable like a dead letter.
    CANCELLED = "cancelled"
    # A chain step waiting for the step before it to complete (caravel_lite.workflows):
    # never claimed, never swept; the previous step's completion makes it PENDING.
    HELD = "held"


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
    # The attempt ran past its job's timeout (caravel_lite.job_options).
    TIMED_OUT = "timed_out"
    # keep_result: the handler's return value could not be stored (not JSON nor the
    # handler's annotated dataclass, or over QueueOptions.max_result_bytes).
    INVALID_RESULT = "invalid_result"


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
    """Where and how to enqueue one job. Validated by the queue before any SQL runs.

    ``queue`` may be omitted when the job type names one; ``tenant_id`` is required.
    ``priority`` and the options after it override the job type's, which override the
    queue's ``QueueOptions`` (None: not set here; see :mod:`caravel_lite.job_options`).
    """

    queue: Optional[str] = None
    tenant_id: str = ""
    idempotency_key: Optional[str] = None
    not_before: Optional[datetime] = None
    priority: Optional[Priority] = None
    max_attempts: Optional[int] = None
    retry_delay: Optional[timedelta] = None
    max_retry_delay: Optional[timedelta] = None
    timeout: Optional[timedelta] = None
    keep_result: Optional[bool] = None
    # Jobs of one queue sharing this key are leased at most concurrency_limit at once
    # (the job type's, else QueueOptions'): caravel_lite.limits.
    concurrency_key: Optional[str] = None
    # With idempotency_key: the key deduplicates only within the period of this length
    # the enqueue falls in (periods aligned to the Unix epoch): caravel_lite.envelope.
    unique_for: Optional[timedelta] = None
    # Debouncing (caravel_lite.debounce): while a job of the same (queue, tenant,
    # debounce_key) is pending and unstarted, an enqueue replaces its payload and moves
    # it to now + debounce.
    debounce: Optional[timedelta] = None
    debounce_key: Optional[str] = None


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
    # A threading.Event whose condition is made by the first wait() (caravel_lite.flags):
    # one per job, and almost no handler waits on it.
    cancelled: threading.Event = field(default_factory=LazyEvent, compare=False)
    # Where ctx.progress reports go: a weak reference to an object with report(done,
    # total), set by the worker that runs the job (dead once the job ended); None
    # elsewhere.
    _progress: Any = field(default=None, repr=False, compare=False)

    def raise_if_cancelled(self) -> None:
        """Raise :class:`Cancelled` if the job must stop now."""
        if self.cancelled.is_set():
            raise Cancelled(f"job {self.job_id} was cancelled")

    def transaction(self) -> ContextManager["peewee.Database"]:
        """``with ctx.transaction() as db:`` a transaction on the queue's database
        ``db``, in which the handler's writes and the job's completion commit together: if the block committed, the job never
        runs again; if it did not, none of its writes exist. Raises
        :class:`caravel_lite.LeaseLost` at the end of the block (everything in it rolled
        back) when the lease is no longer owned. See :mod:`caravel_lite.effects`."""
        from caravel_lite import effects  # the worker's side; values stay a leaf module
        return effects.transaction(self)

    def progress(self, done: int, total: Optional[int] = None) -> None:
        """Report how far the job got (``done`` of ``total``, whole numbers >= 0; bad
        values raise ``InvalidField``). Never waits on the database: the worker stores
        the latest value at most once a second, only when it changed, and the operator
        views show it. Outside a worker (a test calling the handler) it only checks the
        values."""
        from caravel_lite.progress import check_progress

        checked = check_progress(done, total)
        sink = self._progress() if self._progress is not None else None
        if sink is not None:
            sink.report(*checked)


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
    # The options stored with the job (caravel_lite.job_options), None for most jobs.
    _job_options: Optional[str] = field(repr=False, compare=False, default=None)

    def _id_text(self) -> str:
        return self._key or str(self.job_id)


@dataclass(frozen=True)
class ClaimBatch:
    """What one claim got: ``leases``, best first, and whether it lost every race.

    ``contended`` is True when due jobs were there but another claimer took every one
    of them first (the claims that choose jobs before leasing them can lose a race
    that way: the portable path, on servers without SKIP LOCKED, and the claim of a
    queue with flow control); an empty batch with ``contended`` False means nothing was
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
    cancelled: int = 0
    # Chain steps waiting for the step before them (caravel_lite.workflows).
    held: int = 0


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


@dataclass(frozen=True)
class JobResult:
    """What became of a job, for its caller (:meth:`DatabaseQueue.result`).

    ``value`` is the handler's return value when the job type (or its Dispatch) kept
    results and the job completed; otherwise None. ``finished_at`` is set once the job
    is finished (completed, dead-lettered or cancelled). ``started_at``: when its last attempt
    began; ``attempts`` and ``last_failure`` as in :class:`JobStatus`.
    """

    job_id: uuid.UUID
    state: JobState
    value: Any
    finished_at: Optional[datetime]
    started_at: Optional[datetime] = None
    attempts: int = 0
    last_failure: Optional[Failure] = None

    @property
    def finished(self) -> bool:
        """Whether the job reached an end (completed, dead-lettered or cancelled)."""
        return self.finished_at is not None
