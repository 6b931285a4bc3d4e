"""Envelopes: a job validated and encoded for storage, shared by enqueue and the outbox
so that both accept exactly the same input and store exactly the same bytes."""
from __future__ import annotations

import hashlib
import uuid
from typing import Any, NamedTuple, Optional, Tuple

from caravel_lite import codec, tracing, validation
from caravel_lite.clock import ceil_ms, duration_micros, floor_ms, to_micros
from caravel_lite.errors import InvalidField, QueueIdempotencyConflict
from caravel_lite.job_options import NO_OPTIONS, stored_options
from caravel_lite.limits import FlowPolicy
from caravel_lite.options import QueueOptions
from caravel_lite.registry import JobRegistry
from caravel_lite.values import Dispatch, Priority


def dedup_digest(queue: str, tenant_id: str, key: Optional[str],
                 scope: Optional[str] = None) -> Optional[str]:
    """sha256 over (queue, tenant, key), length-prefixed so no two triples collide;
    ``scope`` (a period of ``unique_for``, or the debounce marker) is a fourth part, so
    a scoped key never meets an unscoped one, nor one of another scope."""
    if key is None:
        return None
    digest = hashlib.sha256()
    parts = (queue, tenant_id, key) if scope is None else (queue, tenant_id, key, scope)
    for part in parts:
        raw = part.encode("utf-8")
        digest.update(len(raw).to_bytes(4, "big"))
        digest.update(raw)
    return digest.hexdigest()


class Envelope(NamedTuple):
    """A validated, encoded job ready to be written (to the queue or the outbox).

    An immutable value like the library's frozen dataclasses, but a named tuple: one is
    built on every enqueue, and a frozen dataclass's constructor goes through a guarded
    setattr per field."""

    wire_name: str
    payload: str
    queue: str
    tenant_id: str
    idempotency_key: Optional[str]
    dedup_key: Optional[str]
    priority: Priority
    available_at_ms: int
    max_attempts: int
    # The job's stored options (caravel_lite.job_options): None unless its type or its
    # Dispatch set a backoff, a timeout or keep_result.
    options: Optional[str] = None
    # Flow control (caravel_lite.limits): None unless the queue is gated.
    flow_group: Optional[str] = None
    concurrency_key: Optional[str] = None
    # The enqueuing span's W3C context (caravel_lite.tracing), None without one.
    trace_context: Optional[str] = None
    # A debounced job's window (caravel_lite.debounce); None for every other job.
    debounce_us: Optional[int] = None


# The fourth part of a debounced job's key digest; a period's is "period:..." instead.
DEBOUNCE_SCOPE = "debounce"


def period_scope(period_us: int, now_us: int) -> str:
    """The ``unique_for`` period an enqueue at ``now_us`` falls in: periods of
    ``period_us`` counted from the Unix epoch, so every process agrees on them without
    reading anything."""
    return f"period:{period_us}:{now_us // period_us}"


def prepare_envelope(registry: JobRegistry, options: QueueOptions, job: Any,
                     dispatch: Dispatch, now_us: int) -> Envelope:
    """Validate and encode; raises before anything touches the database.

    Shared by enqueue and the outbox so both accept exactly the same input.
    """
    validation.check_dispatch(dispatch)
    definition = registry.for_job(job)
    # Flat jobs of scalars are proven to round-trip without a trial decode; the rest
    # are encoded, then decoded and compared.
    payload = codec.encode_scalars(definition.job_type, job)
    proven = payload is not None
    if payload is None:
        payload = codec.encode(job)
    size = codec.utf8_size(payload)
    if size > options.max_payload_bytes:
        raise InvalidField("payload", f"{size} bytes exceeds max_payload_bytes "
                           f"({options.max_payload_bytes})")
    if not proven:
        _prove_round_trip(definition.job_type, job, payload)
    if dispatch.not_before is not None:
        due = ceil_ms(to_micros(dispatch.not_before))  # never early
    else:
        due = floor_ms(now_us)
    kind = definition.options
    queue = dispatch.queue
    priority = dispatch.priority
    max_attempts = dispatch.max_attempts
    stored = None
    if kind is not NO_OPTIONS or dispatch.keep_result is not None \
            or dispatch.retry_delay is not None or dispatch.max_retry_delay is not None \
            or dispatch.timeout is not None:
        # Call over type over queue, field by field (caravel_lite.job_options).
        queue = queue if queue is not None else kind.queue
        priority = priority if priority is not None else kind.priority
        max_attempts = max_attempts if max_attempts is not None else kind.max_attempts
        stored = stored_options(kind, dispatch)
    if queue is None:
        raise InvalidField("queue", f"required: neither the Dispatch nor the job type "
                           f"{definition.wire_name!r} names a queue")
    if dispatch.concurrency_key is None and not registry.flow_controlled and not (
            options.fair_tenants or options.concurrency_limit or options.rate_limit):
        # No flow control: answered here, without building a policy (every enqueue).
        group = key = None
    else:
        group, key = FlowPolicy(registry, options).columns(definition, dispatch)
    ident = dispatch.idempotency_key
    scope = None
    debounce_us = None
    if dispatch.unique_for is not None:
        scope = period_scope(duration_micros(dispatch.unique_for), now_us)
    elif dispatch.debounce is not None:
        # The debounce key takes the idempotency key's place (they never go together):
        # the unique index keeps one pending holder per key (caravel_lite.debounce).
        ident, scope = dispatch.debounce_key, DEBOUNCE_SCOPE
        debounce_us = duration_micros(dispatch.debounce)
        due = ceil_ms(now_us + debounce_us)
    return Envelope(definition.wire_name, payload, queue, dispatch.tenant_id,
                    dispatch.idempotency_key,
                    dedup_digest(queue, dispatch.tenant_id, ident, scope),
                    priority if priority is not None else Priority.NORMAL, due,
                    max_attempts if max_attempts is not None else options.max_attempts,
                    stored, group, key, tracing.capture(), debounce_us)


def _prove_round_trip(job_type: type, job: Any, payload: str) -> None:
    """Raise InvalidField unless ``payload`` decodes to a job equal to ``job``."""
    try:
        # Prove now, not at run time, that the stored text decodes back to the type...
        decoded = codec.decode(job_type, payload)
    except codec.PayloadDecodeError as exc:
        raise InvalidField("payload", f"does not match {job_type.__name__}'s "
                           f"annotations: {exc}") from None
    if not codec.same_job(decoded, job):
        # ...and to the same values: under an ``Any`` annotation a datetime, UUID or
        # tuple would come back as a str or a list, so the handler would see another job.
        raise InvalidField("payload", f"would not round-trip: a field of "
                           f"{job_type.__name__} holds a value its annotation "
                           f"cannot restore (use a precise annotation)")


def stored_match(envelope: Envelope, row: Tuple[Any, ...], where: str) -> uuid.UUID:
    """The id of a stored row ``(id, wire_name, payload)`` holding the same idempotency
    key, when it holds the same job; otherwise :class:`QueueIdempotencyConflict`.
    ``where`` says what holds the key ("enqueued", "staged")."""
    existing_id, wire_name, payload = row
    if wire_name != envelope.wire_name or payload != envelope.payload:
        # Often found while handling the unique index's IntegrityError: that is how a
        # taken key shows, not part of the caller's problem, so it is not chained.
        raise QueueIdempotencyConflict(
            f"idempotency key already {where} for a job with a different type or payload",
            uuid.UUID(existing_id)) from None
    return uuid.UUID(existing_id)
