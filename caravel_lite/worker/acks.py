"""Writing what happened to each job: completions (batched), failures, snoozes and
releases, every one fenced by the job's own lease.

Completions may wait in a batch (the worker writes them before it claims or blocks,
and as soon as the oldest waiting one has no more than half of ``lease_duration``
left). A write that fails with a database error is kept and tried again by the next
:meth:`Acknowledgements.flush` (after the worker reconnected): it lands if the lease is
still owned, and answers False otherwise; since every write is fenced, no job is ever
acknowledged twice.
"""
from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple

from caravel_lite import failures, job_options
from caravel_lite.logfields import lease_fields
from caravel_lite.observability import Telemetry, logger
from caravel_lite.options import QueueOptions
from caravel_lite.outcomes import Snooze
from caravel_lite.queue import backoff_micros
from caravel_lite.recorded_errors import message_of
from caravel_lite.values import Failure, QueueLease

if TYPE_CHECKING:
    from caravel_lite.queue import DatabaseQueue

__all__ = ["Acknowledgements"]


class Acknowledgements:
    """The worker's writes of outcomes. Thread-safe: the worker's loop and the
    supervisor (writing due completions while the loop is busy) share it."""

    def __init__(self, queue: DatabaseQueue, telemetry: Telemetry) -> None:
        self.queue = queue
        self.telemetry = telemetry
        self._lock = threading.RLock()  # held while writing: one batch, one writer
        self._completions: List[QueueLease] = []
        self._due: Optional[datetime] = None  # when the waiting ones must be written
        self._margin = queue.options.lease_duration / 2
        # Writes that failed with a database error, tried again by flush().
        self._unwritten: List[Tuple[str, QueueLease, Callable[[], bool]]] = []

    @property
    def waiting(self) -> int:
        return len(self._completions) + len(self._unwritten)

    # -- completions -------------------------------------------------------------------

    def complete_later(self, lease: QueueLease) -> None:
        due = lease.expires_at - self._margin
        with self._lock:
            self._completions.append(lease)
            # The earliest of them decides (a renewed lease expires later).
            if self._due is None or due < self._due:
                self._due = due

    def complete_now(self, lease: QueueLease) -> bool:
        return self._write("completion", lease, lambda: self.queue.complete(lease))

    def complete_with_result(self, lease: QueueLease, text: str) -> bool:
        """Complete now, storing the job's kept result (caravel_lite.results)."""
        return self._write("completion", lease,
                           lambda: self.queue.complete_with_result(lease, text))

    def flush(self) -> None:
        """Write everything waiting now; database errors propagate (what was not
        written stays for the next flush). So does an interrupt (``SystemExit`` from a
        signal handler, ``KeyboardInterrupt``) raised while a write waits on the
        database: the worker's exit path flushes again, and fenced writes may be
        repeated."""
        with self._lock:
            while self._unwritten:
                what, lease, write = self._unwritten[0]
                done = write()  # raises again while the database is still away
                del self._unwritten[0]
                self._report(what, lease, done)
            batch, self._completions, self._due = self._completions, [], None
            if not batch:
                return
            try:
                results = self.queue.complete_many(batch)
            except BaseException:  # an interrupt too: the exit path writes them
                self._completions[:0] = batch
                self._due = min((lease.expires_at for lease in batch)) - self._margin
                raise
        for lease, done in zip(batch, results):
            self._report("batched completion", lease, done)

    def flush_due(self) -> bool:
        """Flush when the oldest waiting completion is within half a lease duration of
        its expiry; True if that touched the database."""
        due = self._due
        if due is None or self.queue.clock() < due:
            return False
        self.flush()
        return True

    def next_due(self) -> Optional[datetime]:
        return self._due

    # -- other outcomes ------------------------------------------------------------------

    def record_failure(self, lease: QueueLease, failure: Failure,
                       error: Optional[BaseException]) -> bool:
        """The one place where a failed attempt is written, for a handler's exception
        (``HANDLER_FAILED``, or ``DISCARDED`` for ``Discard``) as for a job that could
        not run (``UNKNOWN_JOB_TYPE``, ``INVALID_PAYLOAD``; ``error`` is then the decode
        error or None). The failure history keeps the category and ``error``'s type and
        raise site (its message never leaves this process, unless the application's
        ``describe_failure`` says otherwise). Back to PENDING after the backoff, or
        DEAD_LETTER. Once written, one warning says which: ``attempt 2/3, retry at
        <time>`` or ``attempt 3/3, dead-lettered``."""
        def write() -> bool:
            # What fail() decides, told in advance by the same rule (and backoff).
            dead = lease.attempt >= lease._max_attempts or failure is Failure.DISCARDED
            retry_at = None if dead else self.queue.clock() + timedelta(
                microseconds=backoff_micros(self.queue.options, lease.attempt,
                                            job_options.of_lease(lease)))
            done = self.queue.fail(lease, failure, error=error)
            if done:
                logger.warning("job %s on queue %s: %s; %s%s", lease.job_id,
                               lease.context.queue, _failure_text(failure, error),
                               _attempt_text(lease, retry_at),
                               _recorded_text(error, self.queue.options),
                               extra=lease_fields(lease, category=failure,
                                                  next_attempt_at=retry_at,
                                                  error_type=_error_type(error)))
            return done
        return self._write("failure", lease, write)

    def snooze(self, lease: QueueLease, snooze: Snooze) -> bool:
        done = self._write("snooze", lease, lambda: self.queue.snooze(lease, snooze.delay))
        if done:
            logger.info("job %s on queue %s snoozed for %s (attempt given back)",
                        lease.job_id, lease.context.queue, snooze.delay,
                        extra=lease_fields(lease))
        return done

    def release(self, lease: QueueLease) -> bool:
        """Hand back a job that never started (attempt given back); False if the lease
        was no longer owned (then nothing changed)."""
        done = bool(self.queue.release(lease))
        if done:
            logger.info("job %s on queue %s handed back unstarted", lease.job_id,
                        lease.context.queue, extra=lease_fields(lease))
        return done

    def cancelled(self, lease: QueueLease) -> bool:
        """End a job whose cancel request the worker saw: CANCELLED (fenced)."""
        done = self._write("cancellation", lease, lambda: self.queue.end_cancelled(lease))
        if done:
            logger.info("job %s on queue %s cancelled as requested (attempt %d)",
                        lease.job_id, lease.context.queue, lease.attempt,
                        extra=lease_fields(lease, reason="cancel"))
        return done

    def lost(self, lease: QueueLease, why: str) -> None:
        self.telemetry.count("lease_lost", lease.context.queue)
        logger.warning("job %s on queue %s not acknowledged: %s", lease.job_id,
                       lease.context.queue, why, extra=lease_fields(lease))

    # -- writing -------------------------------------------------------------------------

    def _write(self, what: str, lease: QueueLease, write: Callable[[], bool]) -> bool:
        if self.queue.clock() >= lease.expires_at:
            self.lost(lease, f"lease expired before the {what} was written")
            return False
        with self._lock:
            try:
                done = write()
            except BaseException:  # an interrupt too: the exit path writes it
                self._unwritten.append((what, lease, write))
                raise
        self._report(what, lease, done)
        return done

    def _report(self, what: str, lease: QueueLease, done: bool) -> None:
        if not done:
            self.lost(lease, f"lease no longer owned at the {what}")
        elif what.endswith("completion") and logger.isEnabledFor(logging.INFO):
            # Checked first: the fields would be built for every job, logged or not.
            logger.info("job %s on queue %s completed (attempt %d)", lease.job_id,
                        lease.context.queue, lease.attempt, extra=lease_fields(lease))


def _failure_text(failure: Failure, error: Optional[BaseException]) -> str:
    if error is not None and failure in (Failure.HANDLER_FAILED, Failure.DISCARDED):
        return (f"handler raised {failures.qualified_name(type(error))} at "
                f"{failures.raise_site(error) or 'an unknown site'} ({failure.value})")
    return f"failed without running ({failure.value})"


def _recorded_text(error: Optional[BaseException], options: QueueOptions) -> str:
    """The message, when the application records errors (else nothing)."""
    message = message_of(error, options) if error is not None else None
    return f"; message: {message!r}" if message else ""
def _error_type(error: Optional[BaseException]) -> Optional[str]:
    return None if error is None else failures.qualified_name(type(error))


def _attempt_text(lease: QueueLease, retry_at: Optional[datetime]) -> str:
    attempt = f"attempt {lease.attempt}/{lease._max_attempts}"
    if retry_at is None:
        return f"{attempt}, dead-lettered"
    return f"{attempt}, retry at {retry_at.isoformat(timespec='milliseconds')}"
