"""ManualClock: a clock for tests that moves only when told to."""
from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Optional

__all__ = ["ManualClock"]


class ManualClock:
    """A clock that only moves when told to: pass it as ``DatabaseQueue(clock=...)``
    (and to :func:`caravel_lite.testing.drain`, which then moves it through retry
    back-offs). Starts at 2030-01-01 UTC unless given an aware ``start``."""

    def __init__(self, start: Optional[datetime] = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=timezone.utc)
        if self._now.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move by ``delta`` and return the new time."""
        with self._lock:
            self._now = self._now + delta
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to an aware ``instant``."""
        if instant.tzinfo is None:
            raise ValueError("instant must be timezone-aware")
        with self._lock:
            self._now = instant
