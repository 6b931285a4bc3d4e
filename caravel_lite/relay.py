"""OutboxRelay: turns committed outbox intents into queue jobs.

Delivery is at least once. Each intent is enqueued under its own id, so however many
relays run, and however often a pass is cut short, an intent converges on one job as
long as the queue keeps that job (see docs/OUTBOX.md on pruning).
"""
from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import List, Optional, Tuple, Union

import peewee

from caravel_lite import codec, job_options, validation
from caravel_lite.clock import Clock, floor_ms, now_micros, system_clock
from caravel_lite.dialect import retrying
from caravel_lite.errors import CaravelError, InvalidField, QueueIdempotencyConflict
from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.outage import OutagePolicy, check_max_outage
from caravel_lite.outbox import (OutboxCounts, OutboxTable, PendingIntent, SetAsideIntent,
                                 SetAsideReason)
from caravel_lite.envelope import Envelope, dedup_digest
from caravel_lite.queue import DatabaseQueue
from caravel_lite.values import Priority

__all__ = ["OutboxRelay"]

MAX_BATCH = 1000


class OutboxRelay:
    """Moves committed pending intents from ``app_db``'s outbox into ``queue``.

    ``queue`` may live in the same database as the outbox or in another one. Its
    registry decides which wire names the relay accepts, and its ``max_payload_bytes``
    is the limit applied at dispatch. ``clock`` stamps ``dispatched_at`` and
    ``set_aside_at``.
    """

    def __init__(self, app_db: peewee.Database, queue: DatabaseQueue, *,
                 clock: Clock = system_clock) -> None:
        if not isinstance(queue, DatabaseQueue):
            raise InvalidField("queue", "must be a caravel_lite.DatabaseQueue")
        self.db = validation.check_database("app_db", app_db)
        self.queue = queue
        self.clock = validation.check_clock(clock)
        self._table = OutboxTable(app_db)

    def _now_ms(self) -> int:
        return floor_ms(now_micros(self.clock))

    # -- one pass ----------------------------------------------------------------------

    def run_once(self, batch_size: int = 100) -> int:
        """Dispatch up to ``batch_size`` (1..1000) committed pending intents, oldest
        ``staged_at`` first, and return how many this call marked dispatched.

        - Each intent becomes a job with its original wire name, payload, queue, tenant,
          priority, due time and attempt budget, under the intent's id. Then
          ``dispatched_at`` and ``job_id`` are recorded by a conditional UPDATE, so when
          several relays race, each intent is counted by exactly one of them.
        - An intent the queue cannot accept (wire name not registered, payload over the
          queue's limit or not decodable, malformed fields, idempotency conflict) is set
          aside with a reason, logged at WARNING without its payload, and the pass goes
          on with the intents behind it.
        - Database errors (either database unreachable, a lock that does not clear)
          propagate: the intent being handled is not marked and the next pass retries
          it. An intent enqueued but not yet marked is repaired by the next pass without
          a second job.

        Must not be called inside a transaction on either database: the relay has to
        read only committed intents and commit each job before recording it.
        """
        validation.check_int("batch_size", batch_size, 1, MAX_BATCH)
        return self._pass(batch_size)[1]

    def _pass(self, batch_size: int) -> Tuple[int, int]:
        """(intents read, intents marked) for one pass."""
        if self.db.in_transaction() or self.queue.db.in_transaction():
            raise CaravelError("OutboxRelay must not run inside a transaction: it would "
                               "see uncommitted intents and could not commit the jobs")
        intents = self._table.pending(batch_size)
        marked = 0
        for intent in intents:
            if self._relay_one(intent):
                marked += 1
        if marked:
            logger.debug("relay marked %d outbox intent(s) dispatched", marked,
                         extra=fields(count=marked))
        return len(intents), marked

    def _relay_one(self, intent: PendingIntent) -> bool:
        envelope, reason = self._envelope(intent)
        if envelope is None:
            return self._set_aside(intent, reason)
        try:
            result = retrying(self.queue.dialect, self.queue.db,
                              lambda: self.queue.enqueue_envelope(envelope,
                                                                  uuid.UUID(intent.id)))
        except QueueIdempotencyConflict:
            return self._set_aside(intent, SetAsideReason.IDEMPOTENCY_CONFLICT)
        # The job is committed; if the process dies before the next line, the intent
        # stays pending and the next pass finds the same job (by id or by key).
        return self._mark_dispatched(intent, result.job_id)

    def _mark_dispatched(self, intent: PendingIntent, job_id: uuid.UUID) -> bool:
        return self._table.mark_dispatched(intent.id, job_id, self._now_ms())

    def _set_aside(self, intent: PendingIntent, reason: Optional[SetAsideReason]) -> bool:
        assert reason is not None
        if self._table.set_aside(intent.id, reason, self._now_ms()):
            # No payload and no exception text: only the id and the category.
            logger.warning("outbox intent %s set aside: %s", intent.id, reason.value,
                           extra=fields(outbox_id=intent.id, category=reason,
                                        queue=intent.queue if isinstance(intent.queue, str)
                                        else None))
        return False

    def _envelope(self, intent: PendingIntent
                  ) -> Tuple[Optional[Envelope], Optional[SetAsideReason]]:
        """Rebuild the envelope from the stored row, re-checking what the queue would
        check; anything that does not pass is a reason to set the intent aside."""
        try:
            uuid.UUID(intent.id)
            validation.check_queue(intent.queue)
            validation.check_identity("tenant_id", intent.tenant_id)
            if intent.idempotency_key is not None:
                validation.check_identity("idempotency_key", intent.idempotency_key)
            validation.check_wire_name(intent.wire_name)
            priority = Priority(intent.priority)
            if isinstance(intent.max_attempts, bool) or not 1 <= int(intent.max_attempts) <= 100:
                raise ValueError("max_attempts")
            available_at = int(intent.available_at)
            if intent.job_options is not None:
                job_options.parse_stored(intent.job_options)  # ValueError if unreadable
        except (ValueError, TypeError):
            return None, SetAsideReason.INVALID_INTENT
        definition = self.queue.registry.for_name(intent.wire_name)
        if definition is None:
            return None, SetAsideReason.UNKNOWN_JOB_TYPE
        if not isinstance(intent.payload, str):
            return None, SetAsideReason.INVALID_PAYLOAD
        if codec.utf8_size(intent.payload) > self.queue.options.max_payload_bytes:
            return None, SetAsideReason.PAYLOAD_TOO_LARGE
        try:
            codec.decode(definition.job_type, intent.payload)
        except codec.PayloadDecodeError:
            return None, SetAsideReason.INVALID_PAYLOAD
        # The digest is recomputed rather than trusted from the row, so the job's key
        # always matches its (queue, tenant, key).
        return Envelope(intent.wire_name, intent.payload, intent.queue, intent.tenant_id,
                        intent.idempotency_key,
                        dedup_digest(intent.queue, intent.tenant_id, intent.idempotency_key),
                        priority, available_at, int(intent.max_attempts),
                        intent.job_options,
                        trace_context=intent.trace_context
                        if isinstance(intent.trace_context, str) else None), None

    # -- continuous --------------------------------------------------------------------

    def run(self, stop: threading.Event, poll_interval: float = 1.0,
            batch_size: int = 100, *,
            max_outage: Union[None, float, timedelta] = None) -> None:
        """Relay until ``stop`` is set: a full batch is followed at once by the next
        pass; otherwise wait ``poll_interval`` seconds (or until ``stop``).

        ``max_outage``: None (the default) lets database errors propagate and end the
        loop, so a supervisor sees the failure and restarts the relay; undispatched
        intents stay pending meanwhile. Seconds (or a timedelta) make it ride out an
        outage of either database as the worker does (:mod:`caravel_lite.outage`): one
        warning, a jittered back-off of 0.5 s up to 10 s, fresh connections, and carry
        on; it raises only after that long without a successful pass, or at once on a
        fault waiting cannot fix. An interrupted pass is repaired by the next one
        without a second job.
        """
        if not hasattr(stop, "is_set") or not hasattr(stop, "wait"):
            raise InvalidField("stop", "must be a threading.Event")
        if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) \
                or not 0 < poll_interval <= 3600:
            raise InvalidField("poll_interval", "must be a number of seconds in (0, 3600]")
        validation.check_int("batch_size", batch_size, 1, MAX_BATCH)
        budget = check_max_outage(max_outage)
        # Each error judged by the database that raised it (the outbox's may not be of
        # the queue's kind).
        policy = (OutagePolicy(budget, [self.db, self.queue.db], what="outbox relay")
                  if budget is not None else None)
        logger.info("outbox relay started")
        try:
            while not stop.is_set():
                try:
                    read, _ = self._pass(batch_size)
                except Exception as exc:
                    if policy is None:
                        raise
                    if policy.failed(exc, stop.wait):  # re-raises when it gives up
                        break
                    continue
                if policy is not None:
                    policy.succeeded()
                if read < batch_size:
                    stop.wait(poll_interval)
        finally:
            logger.info("outbox relay stopped")

    # -- repair ------------------------------------------------------------------------

    def retry_set_aside(self, outbox_id: uuid.UUID) -> bool:
        """Make a set-aside intent pending again so the next pass tries it; call it
        once the cause is fixed. False when the intent is not set aside."""
        return self._table.retry(outbox_id)

    def status(self) -> OutboxCounts:
        """Pending, dispatched and set-aside intents in the outbox this relay reads."""
        return self._table.counts(self._now_ms())

    def set_aside(self, limit: int = 100) -> List[SetAsideIntent]:
        """Set-aside intents, oldest first, without payloads."""
        return self._table.set_aside_list(validation.check_int("limit", limit, 1, 1000))
