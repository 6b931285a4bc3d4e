"""QueueOptions: limits validated at construction, naming the option (SPEC §5)."""
from __future__ import annotations

from datetime import timedelta

import pytest

from caravel_lite import InvalidField, QueueOptions

S = timedelta(seconds=1)
MS = timedelta(milliseconds=1)


def test_defaults():
    options = QueueOptions()
    assert options.max_attempts == 3
    assert options.max_payload_bytes == 64 * 1024
    assert options.lease_duration == timedelta(minutes=5)
    assert options.lease_renewal_interval is None
    assert options.max_lease_lifetime == timedelta(hours=1)
    assert options.retry_delay == timedelta(seconds=5)
    assert options.max_retry_delay == timedelta(minutes=5)


@pytest.mark.parametrize("kwargs", [
    dict(max_attempts=1), dict(max_attempts=100),
    dict(max_payload_bytes=1), dict(max_payload_bytes=1024 * 1024),
    dict(lease_duration=S, max_lease_lifetime=S),
    dict(lease_duration=timedelta(hours=1)),
    dict(lease_renewal_interval=100 * MS),
    dict(lease_duration=10 * S, lease_renewal_interval=5 * S),
    dict(max_lease_lifetime=timedelta(days=7)),
    dict(retry_delay=MS, max_retry_delay=MS),
    dict(max_retry_delay=timedelta(days=1)),
])
def test_boundaries_are_accepted(kwargs):
    options = QueueOptions(**kwargs)
    for name, value in kwargs.items():
        assert getattr(options, name) == value


@pytest.mark.parametrize("field,kwargs", [
    ("max_attempts", dict(max_attempts=0)),
    ("max_attempts", dict(max_attempts=101)),
    ("max_attempts", dict(max_attempts=True)),
    ("max_attempts", dict(max_attempts=3.0)),
    ("max_payload_bytes", dict(max_payload_bytes=0)),
    ("max_payload_bytes", dict(max_payload_bytes=1024 * 1024 + 1)),
    ("lease_duration", dict(lease_duration=S - timedelta(microseconds=1))),
    ("lease_duration", dict(lease_duration=timedelta(hours=1, microseconds=1))),
    ("lease_duration", dict(lease_duration=300)),
    ("lease_renewal_interval", dict(lease_renewal_interval=99 * MS)),
    ("lease_renewal_interval", dict(lease_duration=10 * S,
                                    lease_renewal_interval=5 * S + MS)),
    ("lease_renewal_interval", dict(lease_renewal_interval=1.0)),
    ("max_lease_lifetime", dict(lease_duration=10 * S, max_lease_lifetime=9 * S)),
    ("max_lease_lifetime", dict(max_lease_lifetime=timedelta(days=7, seconds=1))),
    ("retry_delay", dict(retry_delay=timedelta(microseconds=999))),
    ("retry_delay", dict(retry_delay=5)),
    ("max_retry_delay", dict(retry_delay=10 * S, max_retry_delay=9 * S)),
    ("max_retry_delay", dict(max_retry_delay=timedelta(days=1, seconds=1))),
])
def test_out_of_range_options_name_the_option(field, kwargs):
    with pytest.raises(ValueError) as info:
        QueueOptions(**kwargs)
    assert isinstance(info.value, InvalidField)
    assert info.value.field == field and field in str(info.value)
