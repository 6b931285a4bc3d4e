"""Server-side SVG charts: completed and failed jobs per time bucket.

Drawn as plain SVG markup so the dashboard needs no chart library and no JavaScript;
every bar carries a <title> with its exact numbers, and the page prints the figures
as text beside the chart.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, List, Sequence, Tuple

from markupsafe import Markup, escape

WIDTH = 640
HEIGHT = 150
LEFT = 40      # room for the y-axis labels
BOTTOM = 20    # room for the x-axis labels
TOP = 8


@dataclass(frozen=True)
class Bucket:
    start: datetime
    completed: int
    failed: int


@dataclass(frozen=True)
class Series:
    """Buckets of one width, oldest first, with their totals."""

    buckets: Tuple[Bucket, ...]
    width: timedelta

    @property
    def completed(self) -> int:
        return sum(b.completed for b in self.buckets)

    @property
    def failed(self) -> int:
        return sum(b.failed for b in self.buckets)

    @property
    def peak(self) -> int:
        return max((b.completed + b.failed for b in self.buckets), default=0)


def rebucket(points: Iterable[Tuple[datetime, int, int]], end: datetime,
             width: timedelta, count: int) -> Series:
    """Sum per-minute (start, completed, failed) points into ``count`` buckets of
    ``width`` ending at ``end`` (the bucket holding ``end`` is the last). Points outside
    the range are left out; empty buckets are zero."""
    step = int(width.total_seconds())
    end_s = int(end.timestamp()) // step * step
    first_s = end_s - (count - 1) * step
    completed = [0] * count
    failed = [0] * count
    for start, done, bad in points:
        index = (int(start.timestamp()) - first_s) // step
        if 0 <= index < count:
            completed[index] += int(done)
            failed[index] += int(bad)
    buckets = tuple(Bucket(datetime.fromtimestamp(first_s + i * step, timezone.utc),
                           completed[i], failed[i]) for i in range(count))
    return Series(buckets, width)


def _nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5 x 10^n that is >= value (at least 1)."""
    magnitude = 1
    while True:
        for factor in (1, 2, 5):
            if factor * magnitude >= value:
                return factor * magnitude
        magnitude *= 10


def _label(instant: datetime, width: timedelta) -> str:
    return instant.strftime("%H:%M")


def bar_chart(series: Series, title: str, label_every: int) -> Markup:
    """An SVG bar chart of ``series``: completed (bottom) and failed (top) stacked,
    an x label every ``label_every`` buckets, the y axis up to a round maximum."""
    buckets: Sequence[Bucket] = series.buckets
    top = _nice_ceiling(series.peak)
    plot_w = WIDTH - LEFT
    plot_h = HEIGHT - BOTTOM - TOP
    slot = plot_w / max(len(buckets), 1)
    bar_w = max(slot - 1, 1)
    parts: List[str] = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f'<title>{escape(title)}</title>',
    ]
    for value in (top, top // 2 if top >= 2 else None):
        if value is None:
            continue
        y = TOP + plot_h * (1 - value / top)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 4}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{value}</text>')
    base = TOP + plot_h
    parts.append(f'<line class="axis-line" x1="{LEFT}" x2="{WIDTH}" y1="{base}" y2="{base}"/>')
    parts.append(f'<text class="axis" x="{LEFT - 4}" y="{base + 4}" text-anchor="end">0</text>')
    for i, bucket in enumerate(buckets):
        x = LEFT + i * slot
        ok_h = plot_h * bucket.completed / top
        bad_h = plot_h * bucket.failed / top
        tip = escape(f"{bucket.start:%Y-%m-%d %H:%M} UTC: {bucket.completed} completed, "
                     f"{bucket.failed} failed")
        parts.append(f'<g><title>{tip}</title>')
        if bucket.completed:
            parts.append(f'<rect class="bar-completed" x="{x:.1f}" y="{base - ok_h:.1f}" '
                         f'width="{bar_w:.1f}" height="{ok_h:.1f}"/>')
        if bucket.failed:
            parts.append(f'<rect class="bar-failed" x="{x:.1f}" y="{base - ok_h - bad_h:.1f}" '
                         f'width="{bar_w:.1f}" height="{bad_h:.1f}"/>')
        # An invisible full-height target, so a hover finds the tooltip on empty bars.
        parts.append(f'<rect class="bar-hit" x="{x:.1f}" y="{TOP}" width="{slot:.1f}" '
                     f'height="{plot_h}"/></g>')
        if i % label_every == 0:
            parts.append(f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 5}">'
                         f'{escape(_label(bucket.start, series.width))}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
