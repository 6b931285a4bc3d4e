"""DatabaseQueue: durable jobs in the application's own database.

Delivery is at least once. Enqueue is idempotent per (queue, tenant, key); a claim takes
a renewable lease fenced by a random token; every state change is one conditional
UPDATE, so a worker whose lease expired or was superseded can never overwrite the
outcome recorded by the worker that took over.
"""
from __future__ import annotations

import dataclasses
import secrets
import uuid
from typing import Any, Optional, Sequence, Tuple

import peewee

from caravel_lite import validation
from caravel_lite.admin import QueueAdmin
from caravel_lite.clock import (Clock, ceil_ms, duration_micros, floor_ms, from_ms, now_micros,
                                system_clock)
from caravel_lite.dialect import dialect_of, retrying, transient_retries
from caravel_lite.envelope import Envelope, prepare_envelope
from caravel_lite.errors import InvalidField, QueueIdempotencyConflict
from caravel_lite.ids import new_id
from caravel_lite.observability import Telemetry, default_telemetry, logger
from caravel_lite.options import QueueOptions, resolve_options
from caravel_lite.registry import JobRegistry, require_registry
from caravel_lite.statements import Statements
from caravel_lite.values import (Dispatch, EnqueueResult, Failure, JobContext,
                                 QueueLease)

# How many due candidates one claim round reads; losing the race for one moves on to
# the next, and a claim gives up (returns None) after CLAIM_ROUNDS empty-handed rounds.
CANDIDATES = 4
CLAIM_ROUNDS = 3


def backoff_micros(options: QueueOptions, attempt: int) -> int:
    """retry_delay * 2^(attempt-1), capped at max_retry_delay, in exact microseconds."""
    base = duration_micros(options.retry_delay)
    cap = duration_micros(options.max_retry_delay)
    exponent = max(attempt - 1, 0)
    # Stop doubling once past the cap so the value stays small whatever the attempt.
    if exponent >= 63 or base << exponent >= cap:
        return cap
    return base << exponent


class DatabaseQueue(QueueAdmin):
    """The queue over one Peewee database (SQLite, PostgreSQL or MariaDB/MySQL).

    ``db`` must have been migrated (:func:`caravel_lite.migrate`); the queue never
    creates tables. ``clock`` is the only source of "now".
    """

    def __init__(self, db: peewee.Database, registry: JobRegistry,
                 options: Optional[QueueOptions] = None, *, clock: Clock = system_clock,
                 telemetry: Optional[Telemetry] = None) -> None:
        self.db = validation.check_database("db", db)
        self.registry = require_registry(registry)
        self.options = resolve_options(options)
        self.clock = validation.check_clock(clock)
        self.telemetry = telemetry or default_telemetry()
        self.dialect = dialect_of(db)
        self._sql = Statements.build(db, CANDIDATES)
        self._lease_us = duration_micros(self.options.lease_duration)
        self._lifetime_us = duration_micros(self.options.max_lease_lifetime)
        super().__init__()

    # -- helpers -----------------------------------------------------------------------

    def _now_us(self) -> int:
        return now_micros(self.clock)

    def _execute(self, sql: str, params: Sequence[Any]) -> Any:
        return self.db.execute_sql(sql, params)

    def _fenced(self, sql: str, params: Sequence[Any]) -> int:
        """Run a conditional UPDATE, retrying lock conflicts; returns rows matched."""
        def run() -> int:
            return self.db.execute_sql(sql, params).rowcount
        return retrying(self.dialect, self.db, run, on_retry=transient_retries.increment)

    # -- enqueue -----------------------------------------------------------------------

    def enqueue(self, job: Any, dispatch: Dispatch) -> EnqueueResult:
        """Save ``job`` for later execution and return its id.

        Validates everything first and writes nothing on bad input. With an
        idempotency key, a repeat of the same (queue, tenant, key) with the same wire
        name and payload returns the original id with ``already_enqueued=True`` in any
        state, without changing it; a different payload raises
        :class:`QueueIdempotencyConflict`. Called inside the caller's ``db.atomic()``,
        the job joins that transaction (a savepoint guards the duplicate race).
        """
        envelope = prepare_envelope(self.registry, self.options, job, dispatch,
                                    self._now_us())
        return self.enqueue_envelope(envelope, new_id())

    def enqueue_envelope(self, envelope: Envelope, job_id: uuid.UUID) -> EnqueueResult:
        """Write an already validated envelope under ``job_id`` (the relay passes the
        intent's id so that every relay converges on one job)."""
        now_ms = floor_ms(self._now_us())
        params = (str(job_id), envelope.queue, envelope.tenant_id, envelope.idempotency_key,
                  envelope.dedup_key, envelope.wire_name, envelope.payload,
                  int(envelope.priority), envelope.available_at_ms, envelope.max_attempts,
                  "pending", now_ms, 0, 0, 0, now_ms)
        try:
            if self.db.in_transaction():
                # A savepoint: a duplicate-key error must not poison the caller's
                # transaction (PostgreSQL aborts the whole transaction otherwise).
                with self.db.atomic():
                    self._execute(self._sql.insert, params)
            else:
                self._execute(self._sql.insert, params)
        except peewee.IntegrityError:
            existing = self._existing(envelope, job_id)
            if existing is None:
                raise
            self.telemetry.count("deduplicated", envelope.queue)
            return existing
        self.telemetry.count("accepted", envelope.queue)
        logger.debug("enqueued job %s on queue %s", job_id, envelope.queue)
        return EnqueueResult(job_id, False)

    def _existing(self, envelope: Envelope, job_id: uuid.UUID) -> Optional[EnqueueResult]:
        row = None
        if envelope.dedup_key is not None:
            row = self._execute(self._sql.existing_by_dedup, (envelope.dedup_key,)).fetchone()
        if row is None:
            row = self._execute(self._sql.existing_by_id, (str(job_id),)).fetchone()
        if row is None:
            return None
        existing_id, wire_name, payload = row
        if wire_name != envelope.wire_name or payload != envelope.payload:
            raise QueueIdempotencyConflict(
                "idempotency key already used for a job with a different type or payload",
                uuid.UUID(existing_id))
        return EnqueueResult(uuid.UUID(existing_id), True)

    # -- claim -------------------------------------------------------------------------

    def _sweep(self, queue: str, now_ms: int) -> Tuple[int, int]:
        """Dead-letter expired leases with no attempts left; make the others claimable.
        A plain read first, so the usual case takes no write lock."""
        if self._execute(self._sql.expired_exists, (queue, now_ms)).fetchone() is None:
            return 0, 0
        dead = self._fenced(self._sql.sweep_exhausted, (now_ms, now_ms, queue, now_ms))
        reclaimed = self._fenced(self._sql.sweep_reclaimable, (now_ms, queue, now_ms))
        if dead:
            self.telemetry.count("deadlettered", queue, dead, Failure.ATTEMPTS_EXHAUSTED.value)
            logger.warning("%d expired lease(s) on queue %s dead-lettered: attempts exhausted",
                           dead, queue)
        return dead, reclaimed

    def claim(self, queue: str) -> Optional[QueueLease]:
        """Lease the best due job of ``queue`` (priority, due time, enqueue time, id), or
        return None. Exactly one contender wins a job, across threads and processes.
        Each claim is an attempt."""
        validation.check_queue(queue)
        now_us = self._now_us()
        now_ms = floor_ms(now_us)
        self._sweep(queue, now_ms)
        expires_ms = ceil_ms(now_us + self._lease_us)
        for _ in range(CLAIM_ROUNDS):
            rows = self._execute(self._sql.candidates, (queue, now_ms)).fetchall()
            if not rows:
                return None
            for job_id, attempts, tenant_id, wire_name, payload, max_attempts in rows:
                token = secrets.token_hex(16)
                taken = self._fenced(self._sql.take, (token, expires_ms, now_ms, now_ms,
                                                      job_id, attempts, now_ms))
                if taken == 1:
                    self.telemetry.count("claimed", queue)
                    attempt = attempts + 1
                    ident = uuid.UUID(job_id)
                    context = JobContext(ident, queue, tenant_id, attempt)
                    return QueueLease(ident, attempt, from_ms(expires_ms), context, wire_name,
                                      payload, token, now_us, max_attempts)
        return None

    # -- lease operations ----------------------------------------------------------------

    def renew(self, lease: QueueLease) -> Optional[QueueLease]:
        """Extend an owned lease to min(now + lease_duration, claim start +
        max_lease_lifetime). Returns the new lease, or None (and changes nothing) when
        the lease is no longer owned or the lifetime is used up. Never shortens a lease;
        does not count as an attempt."""
        now_us = self._now_us()
        target_us = min(now_us + self._lease_us, lease._claimed_at_us + self._lifetime_us)
        if target_us <= now_us:
            return None
        target_ms = ceil_ms(target_us)
        now_ms = floor_ms(now_us)
        matched = self._fenced(self._sql.renew, (target_ms, now_ms, str(lease.job_id),
                                                 lease._token, now_ms, target_ms))
        if matched != 1:
            return None
        return dataclasses.replace(lease, expires_at=from_ms(target_ms))

    def complete(self, lease: QueueLease) -> bool:
        """Mark an owned lease's job COMPLETED. False (nothing changed) if not owned."""
        now_ms = floor_ms(self._now_us())
        done = self._fenced(self._sql.complete, (now_ms, now_ms, str(lease.job_id),
                                                 lease._token, now_ms)) == 1
        if done:
            self.telemetry.count("completed", lease.context.queue)
        return done

    def fail(self, lease: QueueLease, failure: Failure) -> bool:
        """Record a failed attempt of an owned lease: back to PENDING after the backoff
        delay (rounded up to the millisecond), or DEAD_LETTER when its attempts are used
        up. Stores only the category. False (nothing changed) if not owned."""
        if not isinstance(failure, Failure):
            raise InvalidField("failure", f"must be a caravel_lite.Failure, got {failure!r}")
        now_us = self._now_us()
        now_ms = floor_ms(now_us)
        queue = lease.context.queue
        ident = (str(lease.job_id), lease._token, now_ms)
        if lease.attempt >= lease._max_attempts:
            changed = self._fenced(self._sql.dead_letter,
                                   (failure.value, now_ms, now_ms) + ident) == 1
            outcome = "deadlettered"
        else:
            due_ms = ceil_ms(now_us + backoff_micros(self.options, lease.attempt))
            changed = self._fenced(self._sql.retry,
                                   (due_ms, failure.value, now_ms) + ident) == 1
            outcome = "retried"
        if changed:
            self.telemetry.count("failed", queue, failure=failure.value)
            self.telemetry.count(outcome, queue, failure=failure.value)
        return changed

    def reclaim_expired(self, queue: str) -> int:
        """Sweep ``queue`` now: expired leases with attempts left become claimable again
        (last failure LEASE_EXPIRED), the others DEAD_LETTER. Returns how many moved."""
        validation.check_queue(queue)
        dead, reclaimed = self._sweep(queue, floor_ms(self._now_us()))
        return dead + reclaimed
