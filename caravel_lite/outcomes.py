"""Handler outcomes besides success and failure, raised from a handler (sync or async).

- ``raise Snooze(delay)``: the job goes back to PENDING, due ``delay`` from now, and the
  attempt this run used is given back (a snooze is not a failure and never exhausts
  the job's attempts). Its last failure is left as it was.
- ``raise Discard()``: the job is dead-lettered at once with the failure category
  ``DISCARDED``, whatever attempts it has left (for errors no retry can fix). It can be
  replayed like any dead letter.

Both are acknowledgements like completion: written only while the job's lease is still
owned (a stale lease writes nothing), and counted (``caravel.queue.jobs.snoozed``;
a discard counts as ``failed`` and ``deadlettered`` with ``failure="discarded"``).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Union

from caravel_lite.errors import InvalidField

__all__ = ["Snooze", "Discard", "MAX_SNOOZE"]

# Longest snooze accepted: far longer is almost surely a unit mistake (ms for s).
MAX_SNOOZE = timedelta(days=30)


class Snooze(Exception):
    """Put the running job back, due after ``delay`` (seconds or a timedelta,
    0 .. 30 days), without using up an attempt."""

    def __init__(self, delay: Union[float, timedelta]) -> None:
        if isinstance(delay, bool) or not isinstance(delay, (int, float, timedelta)):
            raise InvalidField("delay", "must be seconds (a number) or a timedelta, "
                               f"got {type(delay).__name__}")
        value = delay if isinstance(delay, timedelta) else timedelta(seconds=delay)
        if not timedelta(0) <= value <= MAX_SNOOZE:
            raise InvalidField("delay", f"must be between 0 and {MAX_SNOOZE}, got {delay}")
        super().__init__(f"snooze for {value}")
        self.delay = value


class Discard(Exception):
    """Dead-letter the running job at once (failure ``DISCARDED``), no retry."""

    def __init__(self) -> None:
        super().__init__("discard")
