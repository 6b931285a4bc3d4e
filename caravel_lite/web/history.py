"""The day chart's per-minute figures, kept between requests.

The overview asks ``QueueAdmin.stats`` about the last hour on every refresh (counts,
latency, the hour chart). The day chart needs a day of per-minute counts, and reading
a day of finished jobs on every refresh is what would make the page slow on a large
table. A minute that has passed no longer changes (its jobs have finished), so each
minute is read once: the first request reads the whole day, later ones only the last
hour they read anyway, and a gap (no request for more than an hour) is read once.
Everything still comes from the admin object; this only remembers what it said.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable, Dict, List, Optional, Tuple

Point = Tuple[datetime, int, int]  # minute, completed, failed attempts
MINUTE = timedelta(minutes=1)


def floor_minute(instant: datetime) -> datetime:
    return instant.replace(second=0, microsecond=0)


@dataclass
class _Known:
    minutes: Dict[datetime, Tuple[int, int]] = field(default_factory=dict)
    complete_until: Optional[datetime] = None  # every minute before it is final


class DayHistory:
    """Per-minute completed and failed counts over ``span``, per queue filter (at most
    ``max_filters`` remembered, the least recently used forgotten first)."""

    def __init__(self, span: timedelta = timedelta(days=1), max_filters: int = 32) -> None:
        self.span = span
        self.max_filters = max_filters
        self._known: "OrderedDict[Optional[str], _Known]" = OrderedDict()
        self._lock = threading.Lock()

    def points(self, queue_name: Optional[str], now: datetime, recent: Any,
               read_since: Callable[[datetime], Any]) -> List[Point]:
        """The per-minute points of the last ``span`` before ``now``, oldest first.
        ``recent`` is a ``QueueStats`` whose window starts on a whole minute;
        ``read_since(start)`` asks the admin for another one (called only for minutes
        not seen yet)."""
        # Rows are committed a moment after their finish time: a minute counts as
        # final once the next one has passed too.
        current = floor_minute(now) - MINUTE
        day_start = floor_minute(now) - self.span
        with self._lock:
            known = self._known.pop(queue_name, None) or _Known()
            self._known[queue_name] = known  # most recently used last
            while len(self._known) > self.max_filters:
                self._known.popitem(last=False)
            if known.complete_until is None or known.complete_until < recent.since:
                start = day_start if known.complete_until is None else max(
                    known.complete_until, day_start)
                self._merge(known, read_since(start), start, current)
            self._merge(known, recent, recent.since, current)
            for minute in [m for m in known.minutes if m < day_start]:
                del known.minutes[minute]
            points = [(m, c, f) for m, (c, f) in sorted(known.minutes.items())]
        # The last two minutes may still fill: taken from this request, never kept.
        points += [(p.minute, p.completed, p.failed) for p in recent.per_minute
                   if p.minute >= current]
        return points

    @staticmethod
    def _merge(known: _Known, stats: Any, start: datetime, current: datetime) -> None:
        for point in stats.per_minute:
            if start <= point.minute < current:
                known.minutes[point.minute] = (point.completed, point.failed)
        # Minutes of the window without a point had nothing: they are final too.
        if known.complete_until is None or current > known.complete_until:
            known.complete_until = current
