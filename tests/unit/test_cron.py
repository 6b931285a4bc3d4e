"""Cron rules in IANA time zones: every matching wall-clock time runs exactly once,
across both daylight-saving changes (no database involved)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caravel_lite.clock import to_micros
from caravel_lite.cron import parse
from caravel_lite.errors import InvalidField

UTC = timezone.utc


def us(*parts: int) -> int:
    return to_micros(datetime(*parts, tzinfo=UTC))


def utc(instant_us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=instant_us)


def occurrences(expr: str, zone: str, start: datetime, end: datetime) -> list:
    rule = parse(expr, zone, 0)
    found = []
    for at in rule.after(to_micros(start)):
        if at > to_micros(end):
            break
        found.append(utc(at))
    return found


# (zone, expression, day of the change): the 02:30 (01:30) wall-clock time is skipped
# or repeated on that day.
SPRING = [("Europe/Berlin", "30 2 * * *", datetime(2024, 3, 31, 1, 0, tzinfo=UTC)),
          ("America/New_York", "30 2 * * *", datetime(2024, 3, 10, 7, 0, tzinfo=UTC))]
FALL = [("Europe/Berlin", "30 2 * * *", datetime(2024, 10, 27, 0, 30, tzinfo=UTC)),
        ("America/New_York", "30 1 * * *", datetime(2024, 11, 3, 5, 30, tzinfo=UTC))]


@pytest.mark.parametrize("zone,expr,expected", SPRING)
def test_a_skipped_local_time_runs_once_at_the_first_valid_instant_after_it(zone, expr, expected):
    day = expected.replace(hour=0, minute=0)
    found = occurrences(expr, zone, day - timedelta(days=1), day + timedelta(days=2))
    assert len(found) == 3
    assert found[1] == expected
    # the first valid instant after the skipped time is the jump itself: 03:00 local
    assert found[1].astimezone(ZoneInfo(zone)).strftime("%H:%M") == "03:00"
    assert (found[1] - timedelta(microseconds=1)).astimezone(ZoneInfo(zone)).hour < 2
    local = [at.astimezone(ZoneInfo(zone)).strftime("%H:%M") for at in found]
    assert local == ["02:30", "03:00", "02:30"]  # the day before, the day, the day after


@pytest.mark.parametrize("zone,expr,expected", FALL)
def test_a_repeated_local_time_runs_once_at_its_first_occurrence(zone, expr, expected):
    day = expected.replace(hour=0, minute=0)
    found = occurrences(expr, zone, day - timedelta(days=1), day + timedelta(days=2))
    on_the_day = [at for at in found if at.date() == expected.date()]
    assert on_the_day == [expected]
    local = expected.astimezone(ZoneInfo(zone))
    assert local.fold == 0  # the first pass, under summer time
    assert local.utcoffset() > (expected + timedelta(hours=1)).astimezone(ZoneInfo(zone)).utcoffset()
    assert len(found) == 3
    assert [at.astimezone(ZoneInfo(zone)).strftime("%H:%M") for at in found] == \
        [local.strftime("%H:%M")] * 3


def test_times_skipped_together_collapse_into_one_run():
    found = occurrences("*/15 2 * * *", "Europe/Berlin", datetime(2024, 3, 31, tzinfo=UTC),
                        datetime(2024, 3, 31, 23, tzinfo=UTC))
    assert found == [datetime(2024, 3, 31, 1, 0, tzinfo=UTC)]


def test_a_seconds_field_follows_the_same_rules():
    spring = occurrences("15 30 2 * * *", "Europe/Berlin", datetime(2024, 3, 31, tzinfo=UTC),
                         datetime(2024, 3, 31, 23, tzinfo=UTC))
    assert spring == [datetime(2024, 3, 31, 1, 0, tzinfo=UTC)]
    fall = occurrences("15 30 2 * * *", "Europe/Berlin", datetime(2024, 10, 27, tzinfo=UTC),
                       datetime(2024, 10, 27, 23, tzinfo=UTC))
    assert fall == [datetime(2024, 10, 27, 0, 30, 15, tzinfo=UTC)]


def test_hourly_in_a_zone_skips_the_repeated_hour_and_every_hour_is_distinct():
    found = occurrences("0 * * * *", "Europe/Berlin", datetime(2024, 10, 26, 23, 30, tzinfo=UTC),
                        datetime(2024, 10, 27, 3, 30, tzinfo=UTC))
    # 02:00 CEST (00:00Z) runs; 02:00 CET (01:00Z) is the same wall-clock time again
    assert found == [datetime(2024, 10, 27, 0, tzinfo=UTC), datetime(2024, 10, 27, 2, tzinfo=UTC),
                     datetime(2024, 10, 27, 3, tzinfo=UTC)]


def test_latest_seen_from_the_second_pass_of_a_repeated_hour():
    rule = parse("30 2 * * *", "Europe/Berlin", 0)
    first = us(2024, 10, 27, 0, 30)
    for now in (us(2024, 10, 27, 1, 10), us(2024, 10, 27, 1, 30), us(2024, 10, 27, 1, 59)):
        assert rule.latest(now) == first  # 02:10/02:30/02:59 CET: 02:30 already ran
        assert rule.next_after(now) == us(2024, 10, 28, 1, 30)
    assert rule.latest(first - 1) == us(2024, 10, 26, 0, 30)
    assert rule.latest(first) == first


def test_utc_and_before_the_epoch():
    rule = parse("0 0 * * *", "UTC", 0)
    assert rule.latest(-1) == us(1969, 12, 31)
    assert rule.latest(0) == 0
    assert rule.next_after(-1) == 0
    assert rule.next_after(0) == us(1970, 1, 2)


def test_between_is_inclusive_ascending_and_limited():
    rule = parse("0 * * * *", "UTC", 0)
    low, high = us(2024, 5, 1, 0), us(2024, 5, 1, 5)
    assert rule.between(low, high, 100) == [us(2024, 5, 1, h) for h in range(6)]
    assert rule.between(low, high, 2) == [us(2024, 5, 1, 4), us(2024, 5, 1, 5)]
    assert rule.between(low + 1, high - 1, 100) == [us(2024, 5, 1, h) for h in range(1, 5)]


def test_macros_and_spacing():
    assert parse("@daily", "UTC", 0).next_after(0) == us(1970, 1, 2)
    assert parse("  0   2 * *  * ", "UTC", 0).expr == "0 2 * * *"


@pytest.mark.parametrize("expr", ["", "   ", "61 * * * *", "* * *", "* * * * * * *",
                                  "0 0 31 2 *", "x y z a b", None, 5, "0 0\n* * *"])
def test_bad_expressions_name_expr(expr):
    with pytest.raises(InvalidField) as caught:
        parse(expr, "UTC", 0)
    assert caught.value.field == "expr"


@pytest.mark.parametrize("zone", ["Mars/Olympus", "", "../etc/passwd", None, 5])
def test_bad_time_zones_name_timezone(zone):
    with pytest.raises(InvalidField) as caught:
        parse("0 2 * * *", zone, 0)
    assert caught.value.field == "timezone"


ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "UTC"]
EXPRS = ["30 2 * * *", "30 1 * * *", "*/15 * * * *", "0 * * * *", "0 0 * * 0",
         "45 1,2,3 * * *", "0 30 2 * * *"]
# Around the 2024 changes in Europe and North America
INSTANTS = st.integers(min_value=us(2024, 3, 8), max_value=us(2024, 11, 5))


@settings(max_examples=300, deadline=None)
@given(zone=st.sampled_from(ZONES), expr=st.sampled_from(EXPRS), now=INSTANTS)
def test_latest_and_next_bracket_now_with_nothing_between(zone, expr, now):
    rule = parse(expr, zone, 0)
    latest, upcoming = rule.latest(now), rule.next_after(now)
    assert latest <= now < upcoming
    assert rule.next_after(latest) == upcoming
    assert rule.latest(upcoming - 1) == latest
    assert rule.latest(upcoming) == upcoming
    # each occurrence's wall-clock time matches the expression, or it is the jump
    # that replaced a skipped wall-clock time
    local = utc(upcoming).astimezone(ZoneInfo(zone))
    skipped = local.utcoffset() != (utc(upcoming) - timedelta(microseconds=1)).astimezone(
        ZoneInfo(zone)).utcoffset()
    minute = expr.split()[-5]
    if not skipped and minute.isdigit():
        assert local.minute == int(minute)


def test_a_skipped_day_runs_once_when_the_calendar_jumps():
    # Samoa skipped 30 December 2011: noon that day runs at the jump, 31 Dec 00:00 local.
    found = occurrences("0 12 * * *", "Pacific/Apia", datetime(2011, 12, 29, 12, tzinfo=UTC),
                        datetime(2011, 12, 31, 12, tzinfo=UTC))
    local = [at.astimezone(ZoneInfo("Pacific/Apia")).strftime("%Y-%m-%d %H:%M") for at in found]
    assert local == ["2011-12-29 12:00", "2011-12-31 00:00", "2011-12-31 12:00"]
