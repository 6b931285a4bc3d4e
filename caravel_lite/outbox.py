"""The transactional outbox: record a job as an *intent* inside the application's own
transaction, so the business change and the promise to run the job commit or roll back
together, even when the queue lives in another database (or is down).

:class:`QueueOutbox` writes intents; :class:`caravel_lite.relay.OutboxRelay` turns
committed intents into queue jobs. This module owns every statement that touches the
``caravel_outbox`` table, so the relay asks it rather than writing SQL of its own.
"""
from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Dict, List, Mapping, Optional, Sequence

import peewee

from caravel_lite.aio import AsyncOutboxCalls
from caravel_lite.clock import Clock, floor_ms, from_ms, now_micros, system_clock
from caravel_lite.dialect import dialect_of, retrying
from caravel_lite.errors import InvalidField, OutsideTransaction
from caravel_lite.ids import new_id
from caravel_lite import validation
from caravel_lite.options import QueueOptions, resolve_options
from caravel_lite.envelope import Envelope, prepare_envelope, stored_match
from caravel_lite.registry import JobRegistry, require_registry
from caravel_lite.schema import OUTBOX_TABLE
from caravel_lite.values import Dispatch

__all__ = ["QueueOutbox", "StageResult", "OutboxCounts", "SetAsideIntent", "SetAsideReason"]


class SetAsideReason(str, enum.Enum):
    """Why the relay set an intent aside instead of dispatching it. Stored as the text."""

    UNKNOWN_JOB_TYPE = "unknown_job_type"          # wire name not in the relay's registry
    PAYLOAD_TOO_LARGE = "payload_too_large"        # over the queue's current limit
    INVALID_PAYLOAD = "invalid_payload"            # does not decode to the registered type
    INVALID_INTENT = "invalid_intent"              # queue, tenant, key, priority ... malformed
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"  # the queue holds the key with other content


@dataclass(frozen=True)
class StageResult:
    """The receipt of :meth:`QueueOutbox.stage`.

    ``outbox_id`` is also the id the queue job will get when the relay dispatches it
    (unless the queue already held a job with the same key and payload, in which case
    the relay records that job's id). It is a staging receipt: the job is not in the
    queue until the relay has run.
    """

    outbox_id: uuid.UUID
    already_staged: bool


@dataclass(frozen=True)
class OutboxCounts:
    """Intents by situation, read in one query so the figures agree with each other.

    ``set_aside`` intents are neither pending nor dispatched: they wait for a deliberate
    repair (:meth:`caravel_lite.relay.OutboxRelay.retry_set_aside`).
    """

    observed_at: datetime
    pending: int
    dispatched: int
    set_aside: int
    set_aside_reasons: Mapping[str, int]


@dataclass(frozen=True)
class SetAsideIntent:
    """One set-aside intent, without its payload (payloads never leave the table)."""

    outbox_id: uuid.UUID
    queue: str
    tenant_id: str
    wire_name: str
    reason: str
    staged_at: datetime
    set_aside_at: datetime


INSERT_COLUMNS = ("id", "queue", "tenant_id", "idempotency_key", "dedup_key", "wire_name",
                  "payload", "priority", "available_at", "max_attempts", "staged_at",
                  "job_options", "trace_context")

# What the relay reads of a pending intent, in this order.
INTENT_COLUMNS = ("id", "wire_name", "payload", "queue", "tenant_id", "idempotency_key",
                  "priority", "available_at", "max_attempts", "job_options", "trace_context")

_PENDING = "dispatched_at IS NULL AND set_aside_at IS NULL"


@dataclass(frozen=True)
class PendingIntent:
    """A committed, undispatched intent exactly as stored (nothing validated yet)."""

    id: str
    wire_name: Any
    payload: Any
    queue: Any
    tenant_id: Any
    idempotency_key: Any
    priority: Any
    available_at: Any
    max_attempts: Any
    job_options: Any = None  # caravel_lite.job_options (migration 0008)
    trace_context: Any = None


class OutboxTable:
    """The outbox statements over one database: plain parameterised SQL built once.

    Shared by :class:`QueueOutbox` (writes intents) and the relay (reads and marks
    them). Every change to an intent is one conditional UPDATE repeating its predicate,
    so two relays never both mark the same intent.
    """

    def __init__(self, db: peewee.Database) -> None:
        self.db = db
        self.dialect = dialect_of(db)
        p = db.param
        t = OUTBOX_TABLE
        self.insert_sql = (f"INSERT INTO {t} ({', '.join(INSERT_COLUMNS)}) "
                           f"VALUES ({', '.join([p] * len(INSERT_COLUMNS))})")
        self.by_dedup_sql = f"SELECT id, wire_name, payload FROM {t} WHERE dedup_key = {p}"
        self.pending_sql = (f"SELECT {', '.join(INTENT_COLUMNS)} FROM {t} WHERE {_PENDING} "
                            f"ORDER BY staged_at, id LIMIT {p}")
        # params: dispatched_at, job_id, id. Clearing the set-aside columns keeps a row
        # that another relay set aside meanwhile from being counted twice.
        self.mark_sql = (f"UPDATE {t} SET dispatched_at = {p}, job_id = {p}, "
                         f"set_aside_reason = NULL, set_aside_at = NULL "
                         f"WHERE id = {p} AND dispatched_at IS NULL")
        # params: reason, set_aside_at, id
        self.set_aside_sql = (f"UPDATE {t} SET set_aside_reason = {p}, set_aside_at = {p} "
                              f"WHERE id = {p} AND {_PENDING}")
        # params: id
        self.retry_sql = (f"UPDATE {t} SET set_aside_reason = NULL, set_aside_at = NULL "
                          f"WHERE id = {p} AND dispatched_at IS NULL "
                          f"AND set_aside_at IS NOT NULL")
        self.counts_sql = (
            f"SELECT CASE WHEN dispatched_at IS NOT NULL THEN 'dispatched' "
            f"WHEN set_aside_at IS NOT NULL THEN 'set_aside' ELSE 'pending' END AS situation, "
            f"set_aside_reason, COUNT(*) FROM {t} GROUP BY 1, 2")
        self.set_aside_list_sql = (
            f"SELECT id, queue, tenant_id, wire_name, set_aside_reason, staged_at, "
            f"set_aside_at FROM {t} WHERE dispatched_at IS NULL AND set_aside_at IS NOT NULL "
            f"ORDER BY set_aside_at, id LIMIT {p}")

    def _write(self, sql: str, params: Sequence[Any]) -> int:
        """An autocommit conditional UPDATE, repeated on a transient lock conflict."""
        def run() -> int:
            return int(self.db.execute_sql(sql, params).rowcount)
        return retrying(self.dialect, self.db, run)

    def pending(self, limit: int) -> List[PendingIntent]:
        """The oldest committed pending intents, by (staged_at, id).

        Run outside any transaction (autocommit), so it sees only committed rows. There
        is no high-water mark: every pass starts from the oldest pending intent, so one
        committed late with an early ``staged_at`` is still found.
        """
        rows = self.db.execute_sql(self.pending_sql, (limit,)).fetchall()
        return [PendingIntent(*row) for row in rows]

    def mark_dispatched(self, outbox_id: str, job_id: uuid.UUID, now_ms: int) -> bool:
        """Record the dispatch; False when another relay recorded it first."""
        return self._write(self.mark_sql, (now_ms, str(job_id), outbox_id)) == 1

    def set_aside(self, outbox_id: str, reason: SetAsideReason, now_ms: int) -> bool:
        return self._write(self.set_aside_sql, (reason.value, now_ms, outbox_id)) == 1

    def retry(self, outbox_id: object) -> bool:
        return self._write(self.retry_sql, (validation.check_uuid("outbox_id", outbox_id),)) == 1

    def counts(self, now_ms: int) -> OutboxCounts:
        totals = {"pending": 0, "dispatched": 0, "set_aside": 0}
        reasons: Dict[str, int] = {}
        for situation, reason, count in self.db.execute_sql(self.counts_sql).fetchall():
            totals[situation] += int(count)
            if situation == "set_aside":
                key = reason or "unknown"
                reasons[key] = reasons.get(key, 0) + int(count)
        return OutboxCounts(from_ms(now_ms), totals["pending"], totals["dispatched"],
                            totals["set_aside"], dict(sorted(reasons.items())))

    def set_aside_list(self, limit: int) -> List[SetAsideIntent]:
        rows = self.db.execute_sql(self.set_aside_list_sql, (limit,)).fetchall()
        return [SetAsideIntent(uuid.UUID(r[0]), r[1], r[2], r[3], r[4], from_ms(r[5]),
                               from_ms(r[6])) for r in rows]


class QueueOutbox(AsyncOutboxCalls):
    """Stages jobs as intents in the application database's ``caravel_outbox`` table.

    ``app_db`` must have been migrated (:func:`caravel_lite.migrate`); ``registry`` and
    ``options`` give the same validation and payload encoding as
    :meth:`DatabaseQueue.enqueue` (use the options of the queue the relay feeds, so a
    staged payload also fits there). ``clock`` stamps ``staged_at`` and due times.
    """

    def __init__(self, app_db: peewee.Database, registry: JobRegistry,
                 options: Optional[QueueOptions] = None, *, clock: Clock = system_clock) -> None:
        self.db = validation.check_database("app_db", app_db)
        self.registry = require_registry(registry)
        self.options = resolve_options(options)
        self.clock = validation.check_clock(clock)
        self._table = OutboxTable(app_db)

    def stage(self, job: Any, dispatch: Dispatch) -> StageResult:
        """Add an intent to run ``job`` to the caller's open transaction on ``app_db``.

        Guarantees:

        - Refuses (:class:`OutsideTransaction`) unless a transaction is open on
          ``app_db`` in this thread; validates exactly like enqueue (``InvalidField``
          naming the field, ``UnknownJobType``). In both cases nothing is written.
        - Never commits: the intent commits or rolls back with the caller's work.
        - With an idempotency key, a repeat of the same (queue, tenant, key), wire name
          and payload returns the existing intent with ``already_staged=True``, also
          after it was dispatched; other content raises
          :class:`QueueIdempotencyConflict`. ``None`` as key stages a new intent on
          every call.
        - The insert runs in a savepoint, so a duplicate key leaves the caller's
          transaction usable.

        Two transactions staging the same key at once end with one intent: the unique
        index makes the second insert wait for the first transaction. When the first
        commits, the second usually gets ``already_staged=True`` (READ COMMITTED); it may
        instead get ``peewee.IntegrityError`` (its snapshot cannot see the winner, e.g.
        under REPEATABLE READ) or a lock error (deadlock, lock wait timeout, SQLite
        "database is locked"). On any such error, roll the whole transaction back and
        retry the whole unit of work; never commit the business change alone.
        """
        if not self.db.in_transaction():
            raise OutsideTransaction(
                "QueueOutbox.stage must run inside an open transaction on the application "
                "database (for example `with app_db.atomic():`)")
        now_us = now_micros(self.clock)
        envelope = prepare_envelope(self.registry, self.options, job, dispatch, now_us)
        if envelope.concurrency_key is not None:
            # The outbox table keeps no key: refused rather than dropped on the way.
            raise InvalidField("concurrency_key", "the outbox does not carry a concurrency "
                               "key: enqueue the job with queue.enqueue instead")
        if dispatch.unique_for is not None or dispatch.debounce is not None:
            # The relay writes an intent's job under its plain key and due time.
            field = "unique_for" if dispatch.unique_for is not None else "debounce"
            raise InvalidField(field, "the outbox does not carry it: enqueue the job "
                               "with queue.enqueue instead")
        outbox_id = new_id()
        params = (str(outbox_id), envelope.queue, envelope.tenant_id,
                  envelope.idempotency_key, envelope.dedup_key, envelope.wire_name,
                  envelope.payload, int(envelope.priority), envelope.available_at_ms,
                  envelope.max_attempts, floor_ms(now_us), envelope.options,
                  envelope.trace_context)
        try:
            # A savepoint rather than atomic(): atomic() refuses to nest in peewee's
            # manual-commit mode, and PostgreSQL aborts the caller's whole transaction
            # on a failed statement unless it is rolled back to a savepoint.
            with self.db.savepoint():
                self.db.execute_sql(self._table.insert_sql, params)
        except peewee.IntegrityError:
            existing = self._existing(envelope)
            if existing is None:
                raise
            return existing
        return StageResult(outbox_id, False)

    def _existing(self, envelope: Envelope) -> Optional[StageResult]:
        if envelope.dedup_key is None:
            return None
        row = self.db.execute_sql(self._table.by_dedup_sql, (envelope.dedup_key,)).fetchone()
        if row is None:
            return None
        return StageResult(stored_match(envelope, row, "staged"), True)

    def status(self) -> OutboxCounts:
        """Pending, dispatched and set-aside intents (set-aside ones by reason).
        Reads committed rows only when called outside a transaction."""
        return self._table.counts(floor_ms(now_micros(self.clock)))

    counts = status

    def set_aside(self, limit: int = 100) -> List[SetAsideIntent]:
        """The intents the relay set aside, oldest first, without their payloads."""
        return self._table.set_aside_list(validation.check_int("limit", limit, 1, 1000))

    def retry_set_aside(self, outbox_id: uuid.UUID) -> bool:
        """Make a set-aside intent pending again, once its cause is fixed (the wire name
        registered with the relay, the payload repaired, the conflicting job resolved).
        False when the intent is not set aside. Autocommits unless called inside a
        transaction on ``app_db``."""
        return self._table.retry(outbox_id)
