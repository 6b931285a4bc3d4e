"""Enqueueing, mixed into :class:`caravel_lite.queue.DatabaseQueue`: single jobs, jobs
written under a given id (the relay), and batches, all idempotent per (queue, tenant,
key) through the unique dedup index.

Every new job's id is chosen before anything is sent. When the reply of the INSERT (or
of a batch's COMMIT) is lost, the enqueue reads back its own id(s) on a new connection:
a row found under its own id is its own new job (never ``already_enqueued``); none found
means nothing was committed, and the same rows are written again under the same ids."""
from __future__ import annotations

import functools
import logging
import uuid
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, cast

import peewee

from caravel_lite import limits
from caravel_lite.clock import floor_ms
from caravel_lite.debounce import Debouncer, refuse_debounced
from caravel_lite.envelope import Envelope, prepare_envelope, stored_match
from caravel_lite.errors import InvalidField, QueueIdempotencyConflict, StatementTooLarge
from caravel_lite.ids import new_id
from caravel_lite.logfields import envelope_fields, fields
from caravel_lite.observability import logger
from caravel_lite.retry import budgeted, call_budget, recovering
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.statements import JOB_COLUMNS, TRACED_COLUMNS
from caravel_lite.values import Dispatch, EnqueueResult

if TYPE_CHECKING:
    from caravel_lite.dialect import Dialect
    from caravel_lite.observability import Telemetry
    from caravel_lite.options import QueueOptions
    from caravel_lite.registry import JobRegistry
    from caravel_lite.statements import BatchStatements, Statements

# enqueue_many writes new jobs in multi-row INSERTs of at most this many rows (well
# under every database's parameter limit), and redoes a batch that lost a key race
# this many times at most.
INSERT_CHUNK = 200
ENQUEUE_ATTEMPTS = 3
# A single job whose payload has more characters than this is measured against the
# server's statement limit before it is sent (below it, no server's limit is near).
MEASURE_PAYLOAD_FROM = 64 * 1024
_UNREAD = object()


def _row(job_id: uuid.UUID, e: Envelope, now_ms: int,
         traced: Optional[bool] = None) -> Tuple[Any, ...]:
    """A new job's values in JOB_COLUMNS order, or TRACED_COLUMNS when ``traced``
    (by default: when it has a trace context)."""
    row = (str(job_id), e.queue, e.tenant_id, e.idempotency_key, e.dedup_key, e.wire_name,
           e.payload, int(e.priority), e.available_at_ms, e.max_attempts, "pending",
           now_ms, 0, 0, 0, now_ms, e.options)
    if traced is None:
        traced = e.trace_context is not None
    return row + (e.trace_context,) if traced else row


def _same_job(a: Envelope, b: Envelope) -> bool:
    return a.wire_name == b.wire_name and a.payload == b.payload


def _in_chain(exc: BaseException, kind: type) -> Optional[BaseException]:
    """``exc`` or the exception it was raised while handling, if one is a ``kind``."""
    seen: Optional[BaseException] = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class Enqueuing:
    """The enqueue half of DatabaseQueue (it provides db, dialect, registry, options,
    telemetry, the prepared statements and the clock)."""

    # Set by DatabaseQueue.__init__; declared here for type checkers.
    db: peewee.Database
    dialect: Dialect
    registry: JobRegistry
    options: QueueOptions
    telemetry: Telemetry
    _sql: Statements
    _batch: BatchStatements
    _max_statement_bytes: Optional[int]  # read once, on first use
    # A single statement outside a transaction runs without recovering() around it
    # (Dialect.in_process and a database that repeats its own statements).
    _direct_statements: bool
    _flow: limits.FlowPolicy
    _debouncer: Debouncer  # built on the first debounced enqueue

    if TYPE_CHECKING:  # DatabaseQueue's
        def _now_us(self) -> int: ...

        def _execute(self, sql: str, params: Sequence[Any]) -> Any: ...

    def enqueue(self, job: Any, dispatch: Dispatch) -> EnqueueResult:
        """Save ``job`` for later execution and return its id.

        Validates everything first and writes nothing on bad input. With an
        idempotency key, a repeat of the same (queue, tenant, key) with the same wire
        name and payload returns the original id with ``already_enqueued=True`` in any
        state, without changing it; a different payload raises
        :class:`QueueIdempotencyConflict`. Called inside the caller's transaction
        (``db.atomic()``, or ``db.manual_commit()`` after ``db.begin()``), the job joins
        it as :meth:`QueueOutbox.stage` does: a savepoint guards the duplicate race and
        nothing is committed.
        """
        # No retry-budget scope around the whole call (unlike the queue's other calls):
        # its one statement opens the budget itself, and only when it meets a lock
        # conflict; a duplicate key's reads share one opened then (_write_envelope).
        now_us = self._now_us()
        envelope = prepare_envelope(self.registry, self.options, job, dispatch, now_us)
        return self._write_envelope(envelope, new_id(), now_us)

    @budgeted
    def enqueue_envelope(self, envelope: Envelope, job_id: uuid.UUID,
                         now_us: Optional[int] = None) -> EnqueueResult:
        """Write an already validated envelope under ``job_id`` (the relay passes the
        intent's id so that every relay converges on one job). ``now_us``: the
        enqueue time, when the caller has just read the clock. A lost reply is
        recovered as :meth:`enqueue`'s: a row found under ``job_id`` is this call's
        new job."""
        if envelope.flow_group is None and self._flow.gated():
            # Relayed from the outbox, which keeps no group: the queue's own.
            envelope = envelope._replace(flow_group=self._flow.group(envelope.tenant_id, None))
        return self._write_envelope(envelope, job_id,
                                    self._now_us() if now_us is None else now_us)

    def _insert_of(self, envelope: Envelope, job_id: uuid.UUID,
                   now_ms: int) -> Tuple[str, Tuple[Any, ...]]:
        """The INSERT of one new job and its parameters."""
        params: Tuple[Any, ...] = _row(job_id, envelope, now_ms)
        sql = self._sql.insert if envelope.trace_context is None else self._sql.insert_traced
        if envelope.flow_group is not None:  # a gated queue's job (caravel_lite.limits)
            columns = JOB_COLUMNS if envelope.trace_context is None else TRACED_COLUMNS
            sql = limits.insert_sql(JOBS_TABLE, columns, self.db.param, 1)
            params += (envelope.flow_group, envelope.concurrency_key)
        return sql, params

    def _write_envelope(self, envelope: Envelope, job_id: uuid.UUID,
                        now_us: int) -> EnqueueResult:
        if envelope.debounce_us is not None:  # caravel_lite.debounce
            return self._debounced(envelope, job_id, floor_ms(now_us))
        sql, params = self._insert_of(envelope, job_id, floor_ms(now_us))
        if len(envelope.payload) > MEASURE_PAYLOAD_FROM:
            limit = self._statement_limit()
            if limit is not None:  # raises StatementTooLarge, before anything is sent
                self.dialect.check_rows([params], limit, len(sql))
        recovered = False

        def insert() -> None:
            self._execute(sql, params)

        def recover() -> None:
            nonlocal recovered
            recovered = True
            if self._execute(self._sql.existing_by_id, (str(job_id),)).fetchone() is None:
                insert()

        try:
            if self.db.in_transaction():
                # A savepoint: a duplicate-key error must not poison the caller's
                # transaction (PostgreSQL aborts the whole transaction otherwise). Not
                # atomic(), which refuses to nest in peewee's manual-commit mode.
                with self.db.savepoint():
                    insert()
            elif self._direct_statements:
                # recovering() would run the statement as it is: the database repeats
                # its own lock conflicts and, in process, never loses a reply.
                self._execute(sql, params)
            else:
                recovering(self.dialect, self.db, insert, recover, statement=True)
        except peewee.IntegrityError:
            with call_budget(self.db):  # the reads' budget, joining a caller's if open
                if recovered and self._own_row(job_id):
                    # The lost INSERT committed after the read-back found nothing: the
                    # repeat met our own row.
                    self.telemetry.count("accepted", envelope.queue)
                    return EnqueueResult(job_id, False)
                existing = self._existing(envelope, job_id)
            if existing is None:
                raise
            self.telemetry.count("deduplicated", envelope.queue)
            return existing
        self.telemetry.count("accepted", envelope.queue)
        if logger.isEnabledFor(logging.DEBUG):  # the fields only when they are logged
            logger.debug("enqueued job %s on queue %s", job_id, envelope.queue,
                         extra=envelope_fields(job_id, envelope))
        return EnqueueResult(job_id, False)

    @budgeted
    def enqueue_many(self, items: Sequence[Tuple[Any, Dispatch]]) -> List[EnqueueResult]:
        """Enqueue several ``(job, dispatch)`` pairs in one transaction (the caller's,
        through a savepoint, when one is open, also in ``db.manual_commit()``); result i
        belongs to item i.

        Every item is validated before any SQL runs, and nothing is written if one is
        invalid. Idempotency is exactly that of :meth:`enqueue` applied in order: a key
        already used (by a stored job in any state, or by an earlier item of the batch)
        with the same wire name and payload answers that job's id with
        ``already_enqueued=True``; with a different one the whole call raises
        :class:`QueueIdempotencyConflict` and writes nothing of the batch. New jobs are
        written with multi-row INSERTs.

        A lost reply (the connection dropped outside the caller's transaction, the
        batch's COMMIT perhaps done): the new jobs' ids were chosen before sending, so
        the call reads them back on a new connection; found, the batch committed and
        the answer is the one it had (its new jobs ``already_enqueued=False``); not
        found, the batch is written again under the same ids; when that repeat meets
        the lost batch's own rows (its COMMIT reached the server after the read-back),
        the answer is again the lost batch's. Inside the caller's transaction the error
        reaches the caller with the transaction.
        """
        if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
            raise InvalidField("items", "must be a sequence of (job, Dispatch) pairs")
        now_us = self._now_us()
        envelopes: List[Envelope] = []
        for index, item in enumerate(items):
            if not isinstance(item, tuple) or len(item) != 2:
                raise InvalidField("items", f"item {index} must be a (job, Dispatch) pair")
            envelopes.append(prepare_envelope(self.registry, self.options, item[0], item[1],
                                              now_us))
        if not envelopes:
            return []
        refuse_debounced(envelopes, "enqueue_many")
        ids = [new_id() for _ in envelopes]
        # The first item of each key speaks for the key; later ones must match it.
        first: Dict[str, int] = {}
        for index, envelope in enumerate(envelopes):
            key = envelope.dedup_key
            if key is None:
                continue
            earlier = first.setdefault(key, index)
            if earlier != index and not _same_job(envelopes[earlier], envelope):
                raise QueueIdempotencyConflict(
                    f"items {earlier} and {index} use one idempotency key for different "
                    f"types or payloads")
        written: Dict[str, Any] = {}

        def batch() -> Dict[str, uuid.UUID]:
            return self._enqueue_batch(envelopes, ids, first, floor_ms(now_us), written)

        def committed(answer: Dict[str, Any]) -> bool:
            """Whether the batch that computed ``answer`` committed: its new rows are
            there (one transaction: one of them stands for all)."""
            new_ids = answer.get("new_ids", ())
            return bool(new_ids) and self._execute(
                self._batch.existing_ids(len(new_ids)), list(new_ids)).fetchone() is not None

        def recover() -> Dict[str, uuid.UUID]:
            if committed(written):
                return cast(Dict[str, uuid.UUID], written["stored"])
            # Kept: its COMMIT may still reach the server after this read (the race
            # below).
            written["lost"] = dict(written)
            return batch()

        for attempt in range(1, ENQUEUE_ATTEMPTS + 1):
            try:
                # A lock conflict rolled the whole batch back: repeated within the
                # call's budget (only outside the caller's transaction).
                stored = recovering(self.dialect, self.db, batch, recover)
                break
            except peewee.IntegrityError:
                lost = written.pop("lost", None)
                if lost is not None and committed(lost):
                    # The batch whose reply was lost committed after the read-back
                    # found nothing: its repeat met the batch's own rows.
                    stored = cast(Dict[str, uuid.UUID], lost["stored"])
                    break
                # Another writer took one of our keys between our read and our INSERT;
                # the batch was rolled back whole: read again and redo it.
                if attempt == ENQUEUE_ATTEMPTS:
                    raise
            except (peewee.DatabaseError, peewee.InterfaceError) as exc:
                # A server that refused a statement's size also dropped the connection,
                # so the rollback failed too (InterfaceError (0, '')); the refusal is
                # what the caller needs to read.
                refused = _in_chain(exc, StatementTooLarge)
                if refused is None:
                    raise
                self._drop_connection()
                raise refused from None
        results: List[EnqueueResult] = []
        for index, envelope in enumerate(envelopes):
            key = envelope.dedup_key
            if key is None:
                results.append(EnqueueResult(ids[index], False))
            elif key in stored:
                results.append(EnqueueResult(stored[key], True))
            elif first[key] == index:
                results.append(EnqueueResult(ids[index], False))
            else:
                results.append(EnqueueResult(ids[first[key]], True))
        for result, envelope in zip(results, envelopes):
            self.telemetry.count("deduplicated" if result.already_enqueued else "accepted",
                                 envelope.queue)
        logger.debug("enqueued a batch of %d job(s)", len(envelopes),
                     extra=fields(count=len(envelopes)))
        return results

    def _enqueue_batch(self, envelopes: List[Envelope], ids: List[uuid.UUID],
                       first: Dict[str, int], now_ms: int,
                       written: Dict[str, Any]) -> Dict[str, uuid.UUID]:
        """One transaction: read which keys already have a job (raising on a conflict),
        insert the rest, enqueued at ``now_ms``. Returns {dedup key: existing job id},
        also left in ``written`` with the ids of the rows inserted (what a lost reply's
        recovery reads back)."""
        stored: Dict[str, uuid.UUID] = {}
        with self.dialect.write_transaction(self.db):
            keys = list(first)
            for start in range(0, len(keys), INSERT_CHUNK):
                part = keys[start:start + INSERT_CHUNK]
                rows = self._execute(self._batch.existing_by_dedup(len(part)), part).fetchall()
                for existing_id, key, wire_name, payload in rows:
                    stored[key] = stored_match(envelopes[first[key]],
                                               (existing_id, wire_name, payload), "used")
            new = [index for index, envelope in enumerate(envelopes)
                   if envelope.dedup_key is None
                   or (first[envelope.dedup_key] == index and envelope.dedup_key not in stored)]
            # One call is one span's: its rows all have the column, or none has (the
            # rows of one statement have one shape).
            traced = envelopes[0].trace_context is not None
            new_rows: List[Tuple[Any, ...]] = [
                _row(ids[index], envelopes[index], now_ms, traced) for index in new]
            written["stored"] = stored
            written["new_ids"] = [str(ids[index]) for index in new][:INSERT_CHUNK]
            self._insert_rows(envelopes, new, new_rows, traced)
        return stored

    def _insert_rows(self, envelopes: Sequence[Envelope], new: Sequence[int],
                     new_rows: List[Tuple[Any, ...]], traced: bool) -> None:
        """Write ``new_rows`` (the rows of ``envelopes[i]`` for i in ``new``) in
        multi-row INSERTs, in the open transaction."""
        base: Tuple[str, ...] = TRACED_COLUMNS if traced else JOB_COLUMNS
        columns = base
        insert_many = self._batch.insert_many_traced if traced else self._batch.insert_many
        if any(envelopes[index].flow_group is not None for index in new):
            # A gated queue's jobs (caravel_lite.limits) carry their group and key.
            columns = base + limits.FLOW_INSERT_COLUMNS
            new_rows = [row + (envelopes[index].flow_group, envelopes[index].concurrency_key)
                        for row, index in zip(new_rows, new)]
            insert_many = functools.partial(limits.insert_sql, JOBS_TABLE, base,
                                            self.db.param)
        self.dialect.insert_rows(self.db, JOBS_TABLE, columns, new_rows,
                                 insert_many, INSERT_CHUNK, self._statement_limit())

    @budgeted
    def _debounced(self, envelope: Envelope, job_id: uuid.UUID, now_ms: int) -> EnqueueResult:
        debouncer = self.__dict__.get("_debouncer")
        if debouncer is None:
            debouncer = self._debouncer = Debouncer(self.db, self.dialect, self._insert_of,
                                                  self._now_us)
        result = debouncer.write(envelope, job_id, now_ms)
        self.telemetry.count("deduplicated" if result.already_enqueued else "accepted",
                             envelope.queue)
        logger.debug("debounced job %s on queue %s", result.job_id, envelope.queue,
                     extra=envelope_fields(result.job_id, envelope))
        return result

    def _statement_limit(self) -> Optional[int]:
        """Most bytes one statement may take on this server (None: no such limit), read
        once per queue."""
        limit = self.__dict__.get("_max_statement_bytes", _UNREAD)
        if limit is _UNREAD:
            limit = self._max_statement_bytes = self.dialect.statement_limit(self.db)
        return cast(Optional[int], limit)

    def _drop_connection(self) -> None:
        """Close this thread's connection after the server dropped it, so the next
        statement opens a new one (outside a transaction only)."""
        if not self.db.in_transaction():
            try:
                self.db.close()
            except peewee.DatabaseError:
                pass  # the driver refused to close a dead connection; Peewee forgot it

    def _own_row(self, job_id: uuid.UUID) -> bool:
        return self._execute(self._sql.existing_by_id, (str(job_id),)).fetchone() is not None

    def _existing(self, envelope: Envelope, job_id: uuid.UUID) -> Optional[EnqueueResult]:
        row = None
        if envelope.dedup_key is not None:
            row = self._execute(self._sql.existing_by_dedup, (envelope.dedup_key,)).fetchone()
        if row is None:
            row = self._execute(self._sql.existing_by_id, (str(job_id),)).fetchone()
        if row is None:
            return None
        return EnqueueResult(stored_match(envelope, row, "used"), True)
