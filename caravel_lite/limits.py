"""Flow control declared by the application: fair claiming across tenants, per-key
concurrency limits and rate limits, and which of them a queue's jobs are under.

Where each is declared (one place each, so that every process reads the same thing):

- ``QueueOptions(fair_tenants=True)``: the queue (the :class:`DatabaseQueue` object, as
  for ``max_attempts``) claims in rotation across tenants. On the options, not on the
  worker, because the claim is the queue's (``queue.claim`` called directly is fair
  too) and because the enqueue must know it: a job of a fair queue is written with its
  group, which is what keeps the claim's cost bounded (:mod:`caravel_lite.fairness`).
- ``registry.job(..., concurrency_limit=N)`` or ``QueueOptions(concurrency_limit=N)``:
  at most N leased jobs per ``Dispatch(concurrency_key=...)`` in one queue; the type's
  limit wins over the queue's.
- ``registry.job(..., rate_limit=(N, period))``: at most N starts of that type per
  period in one queue; ``QueueOptions(rate_limit=(N, period))``: at most N starts per
  period in each queue. Both apply when both are set.

A queue under any of these is *gated*: its jobs are written with a group (the tenant
in a fair queue; else the concurrency key, or the type of a rate-limited type, or the
shared empty group) and claimed group by group (:mod:`caravel_lite.fairness`). A queue under none of them is written and
claimed exactly as before.
"""
from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, List, Optional, Tuple

from caravel_lite.errors import InvalidField
from caravel_lite.validation import check_int

if TYPE_CHECKING:
    from caravel_lite.options import QueueOptions
    from caravel_lite.registry import JobDefinition, JobRegistry
    from caravel_lite.values import Dispatch

MAX_LIMIT = 1000  # slots per scope: one row each in caravel_slots
MIN_PERIOD = timedelta(milliseconds=1)
MAX_PERIOD = timedelta(days=1)
# The group of the jobs of a gated queue that are neither of a fair queue nor keyed.
SHARED_GROUP = ""


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` starts in any window of ``period`` (a sliding window: see
    :mod:`caravel_lite.slots`)."""

    count: int
    period: timedelta

    @property
    def period_ms(self) -> int:
        return max(1, int(self.period / timedelta(milliseconds=1)))


def check_rate_limit(field: str, value: object) -> Optional[RateLimit]:
    """None, a RateLimit, or an (N, timedelta) pair: N 1..1000, period 1 ms..1 day."""
    if value is None or isinstance(value, RateLimit):
        return value
    if not (isinstance(value, tuple) and len(value) == 2):
        raise InvalidField(field, f"must be (count, datetime.timedelta), got {value!r}")
    count = check_int(field, value[0], 1, MAX_LIMIT)
    period = value[1]
    if not isinstance(period, timedelta) or not MIN_PERIOD <= period <= MAX_PERIOD:
        raise InvalidField(field, f"period must be a timedelta between {MIN_PERIOD} and "
                           f"{MAX_PERIOD}, got {period!r}")
    return RateLimit(count, period)


def check_concurrency_limit(field: str, value: object) -> Optional[int]:
    """None or an int 1..1000."""
    return None if value is None else check_int(field, value, 1, MAX_LIMIT)


def scope(kind: str, *parts: str) -> str:
    """The slots table's key for one limit: sha256 over length-prefixed parts."""
    digest = hashlib.sha256(kind.encode())
    for part in parts:
        raw = part.encode("utf-8")
        digest.update(len(raw).to_bytes(4, "big"))
        digest.update(raw)
    return digest.hexdigest()


@dataclass(frozen=True)
class Gate:
    """One limit a job must pass to start: ``count`` slots of ``scope``; a rate gate
    holds its slot for ``period_ms`` from the start, a concurrency gate for the
    lease."""

    scope: str
    count: int
    period_ms: Optional[int] = None  # None: a concurrency gate
    queue_wide: bool = False  # the queue's own rate: none free stops the whole claim


class FlowPolicy:
    """What the registry and options of one queue declare (read at each call: a type
    may be registered after the queue is built)."""

    def __init__(self, registry: "JobRegistry", options: "QueueOptions") -> None:
        self.registry = registry
        self.options = options
        self._queue_rate = check_rate_limit("rate_limit", options.rate_limit)
        self._queue_wide = bool(options.fair_tenants or options.concurrency_limit
                                or self._queue_rate)

    def gated(self) -> bool:
        """Whether this queue's jobs are grouped and claimed group by group."""
        return self._queue_wide or self.registry.flow_controlled

    def columns(self, definition: "JobDefinition", dispatch: "Dispatch"
                ) -> Tuple[Optional[str], Optional[str]]:
        """(flow_group, concurrency_key) to store with a new job; (None, None) when the
        queue is not gated. A key without a limit is refused: it would limit nothing."""
        key = dispatch.concurrency_key
        if key is not None and self.key_limit(definition) is None:
            raise InvalidField("concurrency_key", "set concurrency_limit on the job type "
                               f"{definition.wire_name!r} or on QueueOptions to use a key")
        if not self.gated():
            return None, None
        return self.group(dispatch.tenant_id, key, definition), key

    def group(self, tenant_id: str, key: Optional[str],
              definition: Optional["JobDefinition"] = None) -> str:
        """A fair queue's groups are its tenants. Elsewhere a keyed job is in its key's
        group and a job of a rate-limited type in its type's, so that a key or type at
        its limit holds back only its own jobs; the others share one group."""
        if self.options.fair_tenants:
            return tenant_id
        if key is not None:
            return "key:" + key
        if definition is not None and definition.rate_limit is not None:
            return "type:" + definition.wire_name
        return SHARED_GROUP

    def key_limit(self, definition: Optional["JobDefinition"]) -> Optional[int]:
        if definition is not None and definition.concurrency_limit is not None:
            return definition.concurrency_limit
        return self.options.concurrency_limit

    def gates(self, queue_name: str, wire_name: str, key: Optional[str]) -> List[Gate]:
        """The limits a job of ``wire_name`` (with concurrency ``key``) must pass to
        start in ``queue_name``, queue-wide first (a queue out of starts stops the
        whole claim), in a fixed order."""
        definition = self.registry.for_name(wire_name)
        gates: List[Gate] = []
        if self._queue_rate is not None:
            rate = self._queue_rate
            gates.append(Gate(scope("rate-queue", queue_name), rate.count, rate.period_ms,
                              True))
        if definition is not None and definition.rate_limit is not None:
            rate = definition.rate_limit
            gates.append(Gate(scope("rate-type", queue_name, wire_name), rate.count,
                              rate.period_ms))
        if key is not None:
            limit = self.key_limit(definition)
            if limit is not None:
                gates.append(Gate(key_scope(queue_name, key), limit))
        return gates



def key_scope(queue_name: str, key: str) -> str:
    return scope("key", queue_name, key)


def check_options(options: "QueueOptions") -> None:
    """Validate QueueOptions' flow-control fields; the rate limit is kept as a
    RateLimit."""
    if not isinstance(options.fair_tenants, bool):
        raise InvalidField("fair_tenants", "must be a bool")
    check_concurrency_limit("concurrency_limit", options.concurrency_limit)
    # A frozen dataclass: the normalised value replaces the (N, period) pair.
    object.__setattr__(options, "rate_limit", check_rate_limit("rate_limit",
                                                               options.rate_limit))


# What an enqueue into a gated queue writes: the ordinary columns and these two.
FLOW_INSERT_COLUMNS = ("flow_group", "concurrency_key")


@functools.lru_cache(maxsize=64)
def insert_sql(table: str, columns: Tuple[str, ...], param: str, rows: int) -> str:
    """INSERT of ``rows`` rows of ``columns`` plus the flow columns."""
    names = (*columns, *FLOW_INSERT_COLUMNS)
    row = "(" + ", ".join([param] * len(names)) + ")"
    return f"INSERT INTO {table} ({', '.join(names)}) VALUES " + ", ".join([row] * rows)
