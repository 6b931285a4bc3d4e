"""The day chart's memory of past minutes (no database): each minute is read from the
admin once, and what it shows equals reading the whole day every time."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Dict, List, Tuple

from caravel_lite.web.history import DayHistory

T0 = datetime(2030, 1, 1, 12, 0, 30, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Point:
    minute: datetime
    completed: int
    failed: int


@dataclass(frozen=True)
class Stats:
    since: datetime
    per_minute: Tuple[Point, ...]


class Admin:
    """Per-minute truth: a job finishes every minute, one in five minutes has failures;
    the current minute keeps filling."""

    def __init__(self) -> None:
        self.reads: List[datetime] = []

    def counts(self, minute: datetime, now: datetime) -> Tuple[int, int]:
        n = int(minute.timestamp() // 60)
        partial = minute == now.replace(second=0, microsecond=0)
        return (1 if not partial else 0) + n % 3, n % 5 == 0

    def stats(self, since: datetime, now: datetime) -> Stats:
        points = []
        minute = since
        while minute <= now:
            completed, failed = self.counts(minute, now)
            if completed or failed:
                points.append(Point(minute, completed, int(failed)))
            minute += MINUTE
        return Stats(since, tuple(points))


def truth(admin: Admin, now: datetime) -> Dict[datetime, Tuple[int, int]]:
    start = now.replace(second=0, microsecond=0) - timedelta(days=1)
    return {p.minute: (p.completed, p.failed) for p in admin.stats(start, now).per_minute}


def run(history: DayHistory, admin: Admin, now: datetime):
    recent = admin.stats((now - HOUR).replace(second=0, microsecond=0), now)

    def read_since(start: datetime) -> Stats:
        admin.reads.append(start)
        return admin.stats(start, now)
    return {m: (c, f) for m, c, f in history.points(None, now, recent, read_since)}


def test_first_request_reads_the_day_later_ones_only_the_hour():
    admin, history = Admin(), DayHistory()
    assert run(history, admin, T0) == truth(admin, T0)
    assert admin.reads == [T0.replace(second=0) - timedelta(days=1)]
    for step in range(1, 40):  # every 5 s for a while: no further reads
        now = T0 + step * timedelta(seconds=5)
        assert run(history, admin, now) == truth(admin, now)
    assert len(admin.reads) == 1


def test_a_gap_longer_than_the_hour_is_read_once_from_where_it_stopped():
    admin, history = Admin(), DayHistory()
    run(history, admin, T0)
    later = T0 + 3 * HOUR
    assert run(history, admin, later) == truth(admin, later)
    assert admin.reads[1] == T0.replace(second=0) - MINUTE
    assert run(history, admin, later + MINUTE) == truth(admin, later + MINUTE)
    assert len(admin.reads) == 2


def test_minutes_older_than_a_day_are_forgotten():
    admin, history = Admin(), DayHistory()
    run(history, admin, T0)
    for hours in range(1, 30):
        now = T0 + hours * timedelta(minutes=50)
        shown = run(history, admin, now)
        assert shown == truth(admin, now)
        assert min(shown) >= now.replace(second=0) - timedelta(days=1)


def test_filters_are_remembered_apart_and_bounded():
    admin, history = Admin(), DayHistory(max_filters=2)
    recent = admin.stats(T0.replace(second=0) - HOUR, T0)
    for name in ("a", "b", "c", "a"):
        history.points(name, T0, recent, lambda start: (admin.reads.append(start),
                                                        admin.stats(start, T0))[1])
    # "a" was forgotten when "c" came, so it was read again.
    assert len(admin.reads) == 4
