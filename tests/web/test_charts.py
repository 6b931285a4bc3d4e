"""The server-side SVG charts (no database)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timedelta, timezone

from caravel_lite.web.charts import bar_chart, rebucket

END = datetime(2030, 1, 1, 12, 0, 30, tzinfo=timezone.utc)
MINUTE = timedelta(minutes=1)
SVG = "{http://www.w3.org/2000/svg}"


def minute(offset: int) -> datetime:
    return datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc) - offset * MINUTE


def test_rebucket_sums_into_buckets_and_drops_points_outside():
    points = [(minute(0), 3, 1), (minute(1), 2, 0), (minute(29), 5, 5),
              (minute(30), 7, 0), (minute(24 * 60), 100, 100)]
    series = rebucket(points, END, timedelta(minutes=30), 48)
    assert len(series.buckets) == 48
    assert series.buckets[-1].start == datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
    assert (series.buckets[-1].completed, series.buckets[-1].failed) == (3, 1)
    # 11:59 and 11:31 fall in the 11:30 bucket, 11:30 too.
    assert (series.buckets[-2].completed, series.buckets[-2].failed) == (14, 5)
    assert (series.completed, series.failed) == (17, 6)
    assert series.peak == 19


def test_chart_has_a_bar_per_nonzero_value_and_exact_titles():
    series = rebucket([(minute(0), 4, 2), (minute(2), 1, 0)], END, MINUTE, 60)
    root = ET.fromstring(str(bar_chart(series, "Last <hour>", label_every=10)))
    assert root.find(f"{SVG}title").text == "Last <hour>"
    completed = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar-completed"]
    failed = [r for r in root.iter(f"{SVG}rect") if r.get("class") == "bar-failed"]
    assert len(completed) == 2 and len(failed) == 1
    tips = [g.find(f"{SVG}title").text for g in root.iter(f"{SVG}g")]
    assert len(tips) == 60
    assert tips[-1] == "2030-01-01 12:00 UTC: 4 completed, 2 failed"
    # The tallest stack reaches the top of the round y axis (peak 6 -> axis 10).
    labels = [t.text for t in root.iter(f"{SVG}text")]
    assert "10" in labels and "5" in labels


def test_empty_series_draws_an_axis_and_no_bars():
    series = rebucket([], END, MINUTE, 60)
    root = ET.fromstring(str(bar_chart(series, "empty", label_every=10)))
    assert not [r for r in root.iter(f"{SVG}rect") if r.get("class", "").startswith("bar-c")]
    assert series.peak == 0
