"""Schedules: when a recurring job is due and under which idempotency key.

A schedule's *slots* are the instants it is due at. Each slot has one idempotency key,
so every scheduler that enqueues it, in any thread, process or machine, lands on the
same job. Nothing here touches the database.

- Interval slots: slot ``n`` covers ``[n * interval, (n + 1) * interval)`` from the
  epoch, with ``n = floor(now / interval)`` (a true floor: negative before the epoch);
  key ``schedule:{name}:{interval_ms}:{n}``.
- Cron slots: the instants of :mod:`caravel_lite.cron`; key
  ``schedule:{name}:cron:{UTC instant}``, e.g. ``schedule:nightly:cron:2024-03-31T01:00:00Z``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from datetime import timezone as dt_timezone
from typing import Iterator, List, Optional, Tuple, Union

from caravel_lite import codec
from caravel_lite.clock import duration_micros, from_ms
from caravel_lite.cron import CronRule
from caravel_lite.errors import InvalidField
from caravel_lite.registry import JobRegistry
from caravel_lite.validation import check_identity, check_queue

NAME_MAX = 64
_NAME = re.compile(r"[a-z0-9._-]+\Z")
MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(days=365)
MAX_CATCH_UP = timedelta(days=365)
# A catch-up enqueues at most this many missed slots of one schedule per pass (an
# interval schedule whose window could hold more is refused at registration).
MAX_CATCH_UP_SLOTS = 1000
SNAPSHOT_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Slot:
    """One due instant of a schedule and the idempotency key of its job."""

    at_ms: int
    key: str

    @property
    def at(self) -> datetime:
        return from_ms(self.at_ms)


@dataclass(frozen=True)
class Interval:
    """Slots every ``interval_ms`` milliseconds from the epoch."""

    interval_ms: int

    def slot(self, name: str, number: int) -> Slot:
        return Slot(number * self.interval_ms, f"schedule:{name}:{self.interval_ms}:{number}")

    def number(self, instant_us: int) -> int:
        return instant_us // (self.interval_ms * 1000)  # floors below the epoch too

    def latest(self, name: str, now_us: int) -> Optional[Slot]:
        return self.slot(name, self.number(now_us))

    def next_after_ms(self, now_us: int) -> Optional[int]:
        return (self.number(now_us) + 1) * self.interval_ms

    def between(self, name: str, low_us: int, high_us: int, limit: int) -> List[Slot]:
        step = self.interval_ms * 1000
        first = -((-low_us) // step)  # the first slot starting at or after low_us
        last = self.number(high_us)
        return [self.slot(name, n) for n in range(max(first, last - limit + 1), last + 1)]

    def backwards(self, name: str, now_us: int) -> Iterator[Slot]:
        """The slots up to the current one, newest first."""
        current = self.number(now_us)
        return (self.slot(name, number) for number in range(current, current - (1 << 62), -1))

    @property
    def timezone(self) -> str:
        return "UTC"

    @property
    def zone(self) -> tzinfo:
        return dt_timezone.utc

    def describe(self) -> str:
        return f"every {timedelta(milliseconds=self.interval_ms)}"


@dataclass(frozen=True)
class Cron:
    """Slots at the occurrences of a cron rule."""

    rule: CronRule

    @staticmethod
    def slot(name: str, at_ms: int) -> Slot:
        stamp = from_ms(at_ms).strftime("%Y-%m-%dT%H:%M:%SZ")
        return Slot(at_ms, f"schedule:{name}:cron:{stamp}")

    def latest(self, name: str, now_us: int) -> Optional[Slot]:
        at = self.rule.latest(now_us)
        return None if at is None else self.slot(name, at // 1000)

    def next_after_ms(self, now_us: int) -> Optional[int]:
        at = self.rule.next_after(now_us)
        return None if at is None else at // 1000

    def between(self, name: str, low_us: int, high_us: int, limit: int) -> List[Slot]:
        return [self.slot(name, at // 1000) for at in self.rule.between(low_us, high_us, limit)]

    def backwards(self, name: str, now_us: int) -> Iterator[Slot]:
        """The occurrences at or before now, newest first."""
        return (self.slot(name, at // 1000) for at in self.rule.at_or_before(now_us))

    @property
    def timezone(self) -> str:
        return self.rule.timezone

    @property
    def zone(self) -> tzinfo:
        return self.rule.zone

    def describe(self) -> str:
        return f"cron {self.rule.expr!r} in {self.rule.timezone}"


Timing = Union[Interval, Cron]


@dataclass(frozen=True)
class Schedule:
    """A registered recurring job: its timing, where it goes and the snapshot of the
    job taken at registration (the payload every slot enqueues)."""

    name: str
    timing: Timing
    queue_name: str
    tenant_id: str
    wire_name: str
    job_type: type = field(repr=False)
    payload: str = field(repr=False)
    catch_up_us: Optional[int]
    registered_us: int

    @property
    def current_slot_on_start(self) -> bool:
        """Interval slots are periods: the current one is due whenever a scheduler first
        looks. A cron slot is an instant: one that passed before the schedule was
        registered is a missed slot (enqueued only within ``catch_up``)."""
        return isinstance(self.timing, Interval)

    def due(self, now_us: int, handled_us: Optional[int]) -> List[Slot]:
        """The slots to enqueue at ``now_us``, oldest first, given that this process
        handled every slot up to ``handled_us`` (None: nothing yet).

        Missed slots are not back-filled: of the slots since ``handled_us`` only the
        newest is due, plus, with ``catch_up``, those within the window."""
        def fresh(slot: Slot) -> bool:
            return handled_us is None or slot.at_ms * 1000 > handled_us

        chosen = {}
        latest = self.timing.latest(self.name, now_us)
        if latest is not None and fresh(latest) and (
                handled_us is not None or self.current_slot_on_start
                or latest.at_ms * 1000 >= self.registered_us):
            chosen[latest.at_ms] = latest
        if self.catch_up_us is not None:
            for slot in self.timing.between(self.name, now_us - self.catch_up_us, now_us,
                                            MAX_CATCH_UP_SLOTS):
                if fresh(slot):
                    chosen[slot.at_ms] = slot
        return [chosen[at] for at in sorted(chosen)]

    def decode_job(self) -> object:
        """A fresh copy of the snapshot (the object given at registration is never used
        again, so later changes to it do not reach the queue)."""
        return codec.decode(self.job_type, self.payload)


# -- validation of registration arguments -----------------------------------------------

def check_schedule_name(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidField("name", f"must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= NAME_MAX:
        raise InvalidField("name", f"must be 1-{NAME_MAX} characters, got {len(value)}")
    if not _NAME.match(value):
        raise InvalidField("name", "may only use lowercase letters, digits, '.', '_' and '-'")
    return value


def check_interval(value: object) -> int:
    """1 s .. 365 days, a whole number of milliseconds; returns the milliseconds."""
    if not isinstance(value, timedelta):
        raise InvalidField("interval", f"must be a datetime.timedelta, got {type(value).__name__}")
    if not MIN_INTERVAL <= value <= MAX_INTERVAL:
        raise InvalidField("interval", f"must be between {MIN_INTERVAL} and {MAX_INTERVAL}, "
                           f"got {value}")
    micros = duration_micros(value)
    if micros % 1000:
        raise InvalidField("interval", f"must be a whole number of milliseconds, got {value}")
    return micros // 1000


def check_catch_up(value: object, interval_ms: Optional[int]) -> Optional[int]:
    """None (no catch-up) or a positive timedelta up to 365 days; for an interval
    schedule the window may hold at most MAX_CATCH_UP_SLOTS slots. Returns microseconds."""
    if value is None:
        return None
    if not isinstance(value, timedelta):
        raise InvalidField("catch_up", f"must be None or a datetime.timedelta, "
                           f"got {type(value).__name__}")
    if not timedelta(0) < value <= MAX_CATCH_UP:
        raise InvalidField("catch_up", f"must be more than 0 and at most {MAX_CATCH_UP} "
                           f"(None means no catch-up), got {value}")
    micros = duration_micros(value)
    if interval_ms is not None and micros // (interval_ms * 1000) > MAX_CATCH_UP_SLOTS:
        raise InvalidField("catch_up", f"{value} holds more than {MAX_CATCH_UP_SLOTS} slots "
                           f"of {timedelta(milliseconds=interval_ms)}")
    return micros


def snapshot(registry: JobRegistry, job: object) -> Tuple[str, type, str]:
    """(wire name, job type, canonical payload) of ``job``, refused when over 1 MiB or
    when the payload would not decode back to the same job."""
    definition = registry.for_job(job)
    try:
        payload = codec.encode(job)
    except InvalidField as exc:
        raise InvalidField("job", str(exc)) from None
    size = codec.utf8_size(payload)
    if size > SNAPSHOT_MAX_BYTES:
        raise InvalidField("job", f"its snapshot is {size} bytes, over the "
                           f"{SNAPSHOT_MAX_BYTES}-byte limit of a scheduled job")
    try:
        decoded = codec.decode(definition.job_type, payload)
    except codec.PayloadDecodeError as exc:
        raise InvalidField("job", f"does not match {definition.job_type.__name__}'s "
                           f"annotations: {exc}") from None
    # Every slot enqueues a decoded copy; it must encode to the very same payload, or
    # two schedulers could disagree about one slot's job.
    if not codec.same_job(decoded, job) or codec.encode(decoded) != payload:
        raise InvalidField("job", f"would not round-trip: a field of "
                           f"{definition.job_type.__name__} holds a value its annotation "
                           f"cannot restore (use a precise annotation)")
    return definition.wire_name, definition.job_type, payload


def check_target(queue_name: object, tenant_id: object) -> None:
    """The queue name and tenant, by the rules of enqueue."""
    check_queue(queue_name)
    check_identity("tenant_id", tenant_id)
