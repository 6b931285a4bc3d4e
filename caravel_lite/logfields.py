"""The structured fields of caravel_lite's log records (``extra=``), so that a JSON
formatter reads a record's facts without parsing its message.

Field names, on every record that concerns them: ``job_id``, ``queue``,
``tenant_id``, ``wire_name``, ``attempt``, ``max_attempts``, ``category`` (a
failure's), ``next_attempt_at`` (ISO 8601, UTC), and ``count``, ``schedule``,
``outbox_id``, ``error_type``, ``signal``, ``component`` (what met a database
outage), ``reason`` and the dashboard server's ``http_method``, ``http_path`` (no
query string: filters can name tenants) and ``http_status`` where a record is about
those. Values are str, int or
None-less: a field with no value is left out. Never anything of a payload, nor an
exception's message (only its type's name).

The fields of a job are gathered when a record is made, not when the call is
written: a debug call on the enqueue path costs one small object while debug is off
(the logging module checks the level before it reads ``extra``).
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

__all__ = ["FIELDS", "fields", "lease_fields", "envelope_fields"]

FIELDS = ("job_id", "queue", "tenant_id", "wire_name", "attempt", "max_attempts",
          "category", "next_attempt_at", "count", "schedule", "outbox_id", "error_type",
          "signal", "component", "reason", "http_method", "http_path", "http_status",
          "worker_id")


def _value(value: Any) -> Any:
    if isinstance(value, (str, int)):  # bool is an int: kept as it is
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if hasattr(value, "value") and isinstance(value.value, str):  # an Enum of ours
        return value.value
    return str(value)


def fields(**values: Any) -> Dict[str, Any]:
    """The given fields, None values left out, each a str or an int."""
    return {name: _value(value) for name, value in values.items() if value is not None}


class _Deferred(Mapping[str, Any]):
    """A mapping built from its source on first read (when a record is made)."""

    __slots__ = ("_build", "_args", "_built")

    def __init__(self, build: Callable[..., Dict[str, Any]], args: Tuple[Any, ...]) -> None:
        self._build = build
        self._args = args
        self._built: Optional[Dict[str, Any]] = None

    def _items(self) -> Dict[str, Any]:
        if self._built is None:
            self._built = self._build(*self._args)
        return self._built

    def __getitem__(self, name: str) -> Any:
        return self._items()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items())

    def __len__(self) -> int:
        return len(self._items())


def _of_lease(lease: Any, more: Dict[str, Any]) -> Dict[str, Any]:
    context = lease.context
    return fields(job_id=lease.job_id, queue=context.queue, tenant_id=context.tenant_id,
                  wire_name=lease.wire_name, attempt=lease.attempt,
                  max_attempts=getattr(lease, "_max_attempts", None), **more)


def lease_fields(lease: Any, **more: Any) -> Mapping[str, Any]:
    """A leased job's fields (plus ``more``: category, next_attempt_at...)."""
    return _Deferred(_of_lease, (lease, more))


def _of_envelope(job_id: Any, envelope: Any) -> Dict[str, Any]:
    return fields(job_id=job_id, queue=envelope.queue, tenant_id=envelope.tenant_id,
                  wire_name=envelope.wire_name, max_attempts=envelope.max_attempts)


def envelope_fields(job_id: Any, envelope: Any) -> Mapping[str, Any]:
    """An enqueued job's fields."""
    return _Deferred(_of_envelope, (job_id, envelope))
