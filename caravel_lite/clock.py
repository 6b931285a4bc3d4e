"""Time: the injectable clock and the millisecond arithmetic the queue relies on.

Every instant is stored as an integer count of UTC epoch milliseconds. Instants in the
future (due times, lease expiries) are rounded *up* so that nothing runs early and no
lease is shortened; "now" is compared exactly (see :func:`floor_ms`).
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Callable

Clock = Callable[[], datetime]
"""A zero-argument callable returning the current time as an aware datetime."""

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def system_clock() -> datetime:
    """The default clock: the system's UTC time (freezegun can freeze it)."""
    return datetime.now(timezone.utc)


def to_micros(instant: datetime) -> int:
    """Exact integer microseconds since the epoch of an aware datetime."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError("a naive datetime has no defined instant; pass an aware one")
    delta = instant - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def duration_micros(duration: timedelta) -> int:
    """Exact integer microseconds of a timedelta."""
    return (duration.days * 86_400 + duration.seconds) * 1_000_000 + duration.microseconds


def floor_ms(micros: int) -> int:
    """Milliseconds rounded down (Python's // floors, also for negative values)."""
    return micros // 1000


def ceil_ms(micros: int) -> int:
    """Milliseconds rounded up, so a stored future instant is never earlier than asked."""
    return -((-micros) // 1000)


def from_ms(millis: int) -> datetime:
    """An aware UTC datetime for a stored millisecond instant."""
    return _EPOCH + timedelta(milliseconds=millis)


def now_micros(clock: Clock) -> int:
    """The clock's reading as exact microseconds; rejects a clock returning naive time."""
    return to_micros(clock())
