"""Templates and the small formatting filters the pages use.

Autoescaping is on for every template (not only files ending in .html), and undefined
names fail loudly, so a value from the database can only reach a page escaped.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional, Union

import jinja2

Seconds = Union[int, float, timedelta, None]


def _seconds(value: Seconds) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def when(instant: Optional[datetime]) -> str:
    """An instant in UTC to the second: ``2026-01-31 12:00:05 UTC``."""
    if instant is None:
        return "—"
    return instant.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(instant: datetime) -> str:
    """An instant as ISO 8601 in UTC, for ``<time datetime=...>``."""
    return instant.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def day(instant: datetime) -> str:
    """The UTC date of an instant: ``2026-01-31``."""
    return instant.astimezone(timezone.utc).strftime("%Y-%m-%d")


def clock_time(instant: datetime) -> str:
    """The UTC time of day of an instant, to the second: ``12:00:05``."""
    return instant.astimezone(timezone.utc).strftime("%H:%M:%S")


def duration(value: Seconds) -> str:
    """A short human duration: ``850 ms``, ``12.5 s``, ``4 min 10 s``, ``3 h 5 min``,
    ``2 d 4 h``."""
    seconds = _seconds(value)
    if seconds is None:
        return "—"
    seconds = abs(seconds)
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    if whole < 86400:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    return f"{whole // 86400} d {whole % 86400 // 3600} h"


def coarse(value: Seconds) -> str:
    """A duration to its largest unit: ``40 s``, ``12 min``, ``3 h``, ``2 d``."""
    seconds = _seconds(value)
    if seconds is None:
        return "—"
    whole = int(abs(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if whole >= size:
            return f"{whole // size} {unit}"
    return f"{whole} s"


def number(value: Optional[int]) -> str:
    return "—" if value is None else f"{value:,}"


def make_environment(now: Callable[[], datetime]) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("caravel_lite.web", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = when
    env.filters["duration"] = duration
    env.filters["number"] = number

    def ago(instant: Optional[datetime]) -> str:
        if instant is None:
            return "—"
        delta = (now() - instant).total_seconds()
        text = coarse(delta)
        return f"{text} ago" if delta >= 0 else f"in {text}"

    env.filters["ago"] = ago

    def age(instant: Optional[datetime]) -> str:
        """How long since ``instant``: ``for 3 min``."""
        if instant is None:
            return "—"
        return f"for {coarse(max((now() - instant).total_seconds(), 0))}"

    env.filters["age"] = age
    env.filters["iso"] = iso
    env.filters["day"] = day
    env.filters["clock"] = clock_time

    def today(instant: datetime) -> bool:
        """``instant`` falls on the current UTC day: lists show only its time."""
        return day(instant) == day(now())

    def list_day(instant: datetime) -> str:
        """The date a list shows beside a time: month and day in the current UTC year
        (``12-01``), the whole date before it; lists stay as narrow after midnight,
        when most recent jobs are of the day before, as during the day."""
        utc = instant.astimezone(timezone.utc)
        return utc.strftime("%m-%d" if utc.year == now().astimezone(timezone.utc).year
                            else "%Y-%m-%d")

    env.tests["today"] = today
    env.filters["list_day"] = list_day
    return env


def render(env: jinja2.Environment, name: str, **context: Any) -> bytes:
    return env.get_template(name).render(**context).encode("utf-8")
