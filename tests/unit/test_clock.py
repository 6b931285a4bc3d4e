"""Millisecond arithmetic and the backoff schedule (SPEC §2, §6), without a database."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from caravel_lite import QueueOptions
from caravel_lite.clock import (ceil_ms, duration_micros, floor_ms, from_ms, now_micros,
                                system_clock, to_micros)
from caravel_lite.queue import backoff_micros
from caravel_lite.testing import ManualClock

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("micros,floor,ceil", [
    (0, 0, 0), (1, 0, 1), (999, 0, 1), (1000, 1, 1), (1001, 1, 2),
    (-1, -1, 0), (-999, -1, 0), (-1000, -1, -1), (-1001, -2, -1),
])
def test_floor_and_ceil(micros, floor, ceil):
    assert floor_ms(micros) == floor and ceil_ms(micros) == ceil


@given(st.integers(min_value=-10**15, max_value=10**15))
def test_rounding_brackets_the_instant(micros):
    assert floor_ms(micros) * 1000 <= micros <= ceil_ms(micros) * 1000
    assert ceil_ms(micros) - floor_ms(micros) == (0 if micros % 1000 == 0 else 1)


def test_instants_are_exact_microseconds():
    instant = datetime(2030, 6, 1, 12, 0, 0, 123_456, tzinfo=timezone.utc)
    micros = to_micros(instant)
    assert micros % 1_000_000 == 123_456
    assert to_micros(instant.astimezone(timezone(timedelta(hours=-7)))) == micros
    assert from_ms(floor_ms(micros)) == instant.replace(microsecond=123_000)
    assert from_ms(ceil_ms(micros)) == instant.replace(microsecond=124_000)
    assert from_ms(0) == EPOCH and from_ms(0).utcoffset() == timedelta(0)
    assert duration_micros(timedelta(days=1, microseconds=1)) == 86_400_000_001


def test_naive_instants_and_clocks_are_refused():
    with pytest.raises(ValueError):
        to_micros(datetime(2030, 1, 1))
    with pytest.raises(ValueError):
        now_micros(lambda: datetime(2030, 1, 1))


def test_system_clock_is_aware_utc():
    now = system_clock()
    assert now.utcoffset() == timedelta(0)


def test_manual_clock():
    clock = ManualClock(datetime(2030, 1, 1, tzinfo=timezone.utc))
    assert clock.advance(timedelta(seconds=2)) == datetime(2030, 1, 1, 0, 0, 2, tzinfo=timezone.utc)
    clock.set(EPOCH)
    assert clock() == EPOCH
    with pytest.raises(ValueError):
        clock.set(datetime(2030, 1, 1))


def test_default_backoff_schedule():
    options = QueueOptions()
    delays = [backoff_micros(options, attempt) // 1_000_000 for attempt in range(1, 11)]
    assert delays == [5, 10, 20, 40, 80, 160, 300, 300, 300, 300]


def test_backoff_is_exact_and_never_overflows():
    options = QueueOptions(retry_delay=timedelta(microseconds=1500),
                           max_retry_delay=timedelta(days=1))
    assert backoff_micros(options, 1) == 1500
    assert backoff_micros(options, 2) == 3000
    assert backoff_micros(options, 100) == 86_400_000_000
    assert backoff_micros(options, 10**9) == 86_400_000_000
    assert backoff_micros(options, 0) == 1500  # never below the base


@given(st.integers(min_value=1, max_value=200))
def test_backoff_is_monotonic_and_capped(attempt):
    options = QueueOptions(retry_delay=timedelta(milliseconds=7),
                           max_retry_delay=timedelta(minutes=1))
    value = backoff_micros(options, attempt)
    assert value <= 60_000_000
    assert value >= backoff_micros(options, max(attempt - 1, 1))
    assert value == min(7000 * 2 ** (attempt - 1), 60_000_000)
