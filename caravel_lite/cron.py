"""Cron expressions evaluated in an IANA time zone, turned into UTC instants.

Which wall-clock times match an expression is decided by cronsim (the optional ``cron``
extra), run on *naive local* times so that its own DST quirks never apply. This module
then maps every matching wall-clock time to exactly one UTC instant:

- a wall-clock time that does not exist (the clocks spring forward over it) runs once,
  at the first valid instant after it, which is the moment of the jump; several such
  times (``*/15 2 * * *`` on the spring-forward night) collapse into that one instant;
- a wall-clock time that occurs twice (the clocks fall back) runs once, at its first
  occurrence.

The mapping is monotonic (a later wall-clock time never maps to an earlier instant),
which is what lets the searches below walk the expression forwards or backwards from
the local time of a given instant.

All instants are integer epoch microseconds (the queue's clock resolution); the
occurrences themselves fall on whole seconds.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator, List, Optional

try:  # the `cron` extra: only cron schedules need it
    from cronsim import CronSim, CronSimError
except ImportError:  # pragma: no cover - exercised only without the extra installed
    CronSim = None  # type: ignore[assignment,misc]
    CronSimError = ValueError  # type: ignore[assignment,misc]

from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from caravel_lite.clock import to_micros
from caravel_lite.errors import InvalidField

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_SECOND = timedelta(seconds=1)
EXPR_MAX = 200

# The usual shorthands, spelled out as five-field expressions.
MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def _utc(instant_us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=instant_us)


def check_timezone(value: object) -> ZoneInfo:
    """An IANA time zone name (or a ``zoneinfo.ZoneInfo`` built from one)."""
    if isinstance(value, ZoneInfo) and value.key:
        return value
    if not isinstance(value, str) or not value.strip():
        raise InvalidField("timezone", "must be an IANA time zone name such as "
                           "'Europe/Berlin' or 'UTC'")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidField("timezone", f"unknown IANA time zone {value!r}") from None


@dataclass(frozen=True)
class CronRule:
    """A cron expression in a time zone. Build it with :func:`parse`.

    ``expr`` has five fields (minute hour day-of-month month day-of-week) or six with a
    leading seconds field, as cronsim reads them; ``@hourly``, ``@daily``, ``@weekly``,
    ``@monthly`` and ``@yearly`` are accepted too.
    """

    expr: str
    zone: ZoneInfo = field(compare=False)

    @property
    def timezone(self) -> str:
        return str(self.zone.key)

    # -- wall clock <-> instants ------------------------------------------------------

    def _wall(self, instant_us: int) -> datetime:
        """The aware local time of an instant (``fold=1`` in a repeated hour's second pass)."""
        return _utc(instant_us).astimezone(self.zone)

    def _instant(self, wall: datetime) -> int:
        """The one instant a matching naive wall-clock time runs at (see the module)."""
        first = wall.replace(tzinfo=self.zone, fold=0)
        if first.astimezone(timezone.utc).astimezone(self.zone).replace(tzinfo=None) == wall:
            return to_micros(first)  # exists; in a repeated hour, its first pass
        # In a gap: find the first instant whose wall-clock time is after it. The gap's
        # two readings (offset before and after the jump) bracket the jump.
        low, high = sorted((to_micros(first), to_micros(wall.replace(tzinfo=self.zone, fold=1))))
        while low < high:  # smallest instant in [low, high] whose local time is > wall
            middle = (low + high) // 2
            if self._wall(middle).replace(tzinfo=None) > wall:
                high = middle
            else:
                low = middle + 1
        return low

    def _sim(self, start: datetime, reverse: bool = False) -> Any:
        if CronSim is None:  # pragma: no cover
            raise ImportError("cron schedules need cronsim: pip install 'caravel_lite[cron]'")
        return CronSim(MACROS.get(self.expr.strip().lower(), self.expr), start, reverse=reverse)

    # -- searches ------------------------------------------------------------------------

    def after(self, instant_us: int) -> Iterator[int]:
        """Occurrences strictly after ``instant_us``, ascending, each instant once."""
        wall = self._wall(instant_us).replace(tzinfo=None)
        # Wall-clock times up to `wall` map to instants <= instant_us (monotonic mapping),
        # so the walk starts there; within a repeated hour it may meet a few that
        # already ran (first pass), which the filter drops.
        # (cronsim's iterator ends after 50 years without a match.)
        last = instant_us
        for match in self._sim(wall):
            at = self._instant(match)
            if at > last:
                last = at
                yield at

    def at_or_before(self, instant_us: int) -> Iterator[int]:
        """Occurrences at or before ``instant_us``, newest first, each instant once."""
        local = self._wall(instant_us)
        wall = local.replace(tzinfo=None)
        if local.fold == 1:
            # In the second pass of a repeated hour: wall-clock times up to the same
            # reading of the first pass plus the hour's length already ran.
            first_pass = wall.replace(tzinfo=self.zone, fold=0).utcoffset()
            second_pass = local.utcoffset()
            assert first_pass is not None and second_pass is not None  # a ZoneInfo time
            wall += first_pass - second_pass
        # cronsim's reverse walk yields times strictly before its start: start one
        # second past the whole second at or before `wall`.
        start = wall.replace(microsecond=0) + _SECOND
        last: Optional[int] = None
        for match in self._sim(start, reverse=True):
            at = self._instant(match)
            if at <= instant_us and (last is None or at < last):
                last = at
                yield at

    def next_after(self, instant_us: int) -> Optional[int]:
        return next(self.after(instant_us), None)

    def latest(self, instant_us: int) -> Optional[int]:
        return next(self.at_or_before(instant_us), None)

    def between(self, low_us: int, high_us: int, limit: int) -> List[int]:
        """Occurrences in [low_us, high_us], ascending; the newest ``limit`` of them."""
        found: List[int] = []
        for at in self.at_or_before(high_us):
            if at < low_us or len(found) >= limit:
                break
            found.append(at)
        found.reverse()
        return found


def parse(expr: object, zone: object, now_us: int) -> CronRule:
    """Validate ``expr`` and ``zone`` (``InvalidField`` naming ``expr`` or ``timezone``)
    and check that the expression matches at least once after ``now_us``."""
    if not isinstance(expr, str) or not expr.strip():
        raise InvalidField("expr", "must be a non-empty cron expression such as '0 2 * * *'")
    if len(expr) > EXPR_MAX:
        raise InvalidField("expr", f"must be at most {EXPR_MAX} characters")
    if any(ord(ch) < 32 and ch not in " \t" for ch in expr):
        raise InvalidField("expr", "must not contain control characters")
    rule = CronRule(" ".join(expr.split()), check_timezone(zone))
    fields = len(MACROS.get(rule.expr.lower(), rule.expr).split())
    if fields not in (5, 6):
        raise InvalidField("expr", f"must have 5 fields (minute hour day month weekday) or 6 "
                           f"(with a leading seconds field), got {fields}")
    try:
        rule._sim(datetime(2000, 1, 1))
        upcoming = rule.next_after(now_us)
    except CronSimError as exc:
        raise InvalidField("expr", f"{rule.expr!r} is not a valid cron expression: {exc}") from None
    if upcoming is None:
        raise InvalidField("expr", f"{rule.expr!r} never matches")
    return rule
