"""Schedule rules without a database: names, intervals, catch-up windows, slot
numbers and keys, and which slots a pass enqueues."""
from __future__ import annotations

import itertools
from datetime import timedelta

import pytest

from caravel_lite.cron import parse
from caravel_lite.errors import InvalidField
from caravel_lite.schedules import (Cron, Interval, Schedule, check_catch_up, check_interval,
                                    check_schedule_name)

S = 1_000_000  # microseconds per second


@pytest.mark.parametrize("name", ["a", "nightly-report", "x.y_z-0", "a" * 64])
def test_good_names(name):
    assert check_schedule_name(name) == name


@pytest.mark.parametrize("name", ["", "a" * 65, "Nightly", "with space", "a/b", "é", None, 3])
def test_bad_names(name):
    with pytest.raises(InvalidField) as caught:
        check_schedule_name(name)
    assert caught.value.field == "name"


@pytest.mark.parametrize("interval,ms", [(timedelta(seconds=1), 1000),
                                         (timedelta(seconds=1, milliseconds=1), 1001),
                                         (timedelta(days=365), 365 * 86_400_000)])
def test_good_intervals(interval, ms):
    assert check_interval(interval) == ms


@pytest.mark.parametrize("interval", [timedelta(0), timedelta(milliseconds=999),
                                      timedelta(days=366), timedelta(days=365, milliseconds=1),
                                      timedelta(seconds=1, microseconds=1), timedelta(seconds=-5),
                                      60, 1.5, None, "1m"])
def test_bad_intervals(interval):
    with pytest.raises(InvalidField) as caught:
        check_interval(interval)
    assert caught.value.field == "interval"


def test_catch_up_rules():
    assert check_catch_up(None, 1000) is None
    assert check_catch_up(timedelta(minutes=10), 60_000) == 600 * S
    assert check_catch_up(timedelta(seconds=1000), 1000) == 1000 * S  # 1000 slots: the most
    for bad in (timedelta(0), timedelta(seconds=-1), timedelta(days=366), 60):
        with pytest.raises(InvalidField) as caught:
            check_catch_up(bad, None)
        assert caught.value.field == "catch_up"
    with pytest.raises(InvalidField) as caught:
        check_catch_up(timedelta(seconds=1001), 1000)
    assert caught.value.field == "catch_up"


def test_interval_slots_are_a_true_floor_around_the_epoch():
    every = Interval(1000)
    assert every.latest("n", -1000).key == "schedule:n:1000:-1"  # 1 ms before the epoch
    assert every.latest("n", -1).key == "schedule:n:1000:-1"
    assert every.latest("n", -1_000_000).key == "schedule:n:1000:-1"
    assert every.latest("n", -1_000_001).key == "schedule:n:1000:-2"
    assert every.latest("n", 0).key == "schedule:n:1000:0"
    assert every.latest("n", 999_999).key == "schedule:n:1000:0"
    assert every.latest("n", -1000).at_ms == -1000
    assert every.next_after_ms(-1) == 0
    assert every.next_after_ms(0) == 1000


def test_interval_between_and_backwards():
    every = Interval(60_000)
    assert [s.at_ms for s in every.between("n", 60 * S, 180 * S, 10)] == [60_000, 120_000, 180_000]
    assert [s.at_ms for s in every.between("n", 60 * S + 1, 180 * S - 1, 10)] == [120_000]
    assert [s.at_ms for s in every.between("n", 0, 600 * S, 2)] == [540_000, 600_000]
    assert [s.key for s in itertools.islice(every.backwards("n", 130 * S), 3)] == [
        "schedule:n:60000:2", "schedule:n:60000:1", "schedule:n:60000:0"]


def test_cron_keys_come_from_the_utc_instant():
    rule = parse("30 2 * * *", "Europe/Berlin", 0)
    # 2024-03-31 02:30 Berlin does not exist; it runs at 01:00 UTC
    slot = Cron(rule).latest("nightly", 1_711_846_800 * S)
    assert slot.key == "schedule:nightly:cron:2024-03-31T01:00:00Z"


def schedule(timing, catch_up_s=None, registered_s=0):
    return Schedule("n", timing, "q", "t", "w.v1", object, "{}",
                    None if catch_up_s is None else catch_up_s * S, registered_s * S)


def test_an_interval_pass_enqueues_only_the_current_slot_after_a_gap():
    every = schedule(Interval(60_000))
    assert [s.at_ms for s in every.due(3600 * S + 5, None)] == [3_600_000]
    assert every.due(3600 * S + 10, 3600 * S + 5) == []  # same slot: already handled
    assert [s.at_ms for s in every.due(5 * 3600 * S, 3600 * S)] == [18_000_000]  # no back-fill


def test_an_interval_catch_up_covers_its_window_only():
    every = schedule(Interval(60_000), catch_up_s=300)
    due = every.due(5 * 3600 * S + 30 * S, None)
    assert [s.at_ms // 1000 for s in due] == [18_000 - 240 + 60 * i for i in range(5)]
    # later passes never repeat what this process handled
    assert every.due(5 * 3600 * S + 40 * S, 5 * 3600 * S + 30 * S) == []


def test_a_cron_slot_before_registration_is_missed_unless_within_catch_up():
    rule = parse("0 * * * *", "UTC", 0)
    hourly = schedule(Cron(rule), registered_s=3600 * 10 + 5)
    assert hourly.due(3600 * 10 + 6 * S, None) == []
    exact = schedule(Cron(rule), registered_s=3600 * 10)
    assert [s.at_ms for s in exact.due(3600 * 10 * S, None)] == [36_000_000]
    # a two-hour window at 10:00:05 reaches back to 08:00:05: 09:00 and 10:00
    caught = schedule(Cron(rule), catch_up_s=2 * 3600, registered_s=3600 * 10 + 5)
    assert [s.at_ms // 1000 for s in caught.due(36_005 * S, None)] == [32_400, 36_000]
    # once running, the newest occurrence since the last pass is due
    assert [s.at_ms // 1000 for s in hourly.due(3 * 3600 * 10 * S, 36_006 * S)] == [108_000]
