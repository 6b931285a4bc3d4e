"""Input rules shared by enqueue and the outbox (SPEC §4), without a database."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from caravel_lite import Dispatch, InvalidField, Priority
from caravel_lite.admin.lookup import prefix_bounds
from caravel_lite.validation import (check_dispatch, check_identity, check_not_before,
                                     check_queue)


@pytest.mark.parametrize("value", ["a", "q" * 64, "reports", "a.b_c-9"])
def test_valid_queue_names(value):
    assert check_queue(value) == value


@pytest.mark.parametrize("value", ["", "q" * 65, "Reports", "a b", "a\n", "é", None, 3])
def test_invalid_queue_names(value):
    with pytest.raises(InvalidField) as info:
        check_queue(value)
    assert info.value.field == "queue"


@pytest.mark.parametrize("value", ["t", "t" * 128, "Tenant A", " padded ", "ünïcode", "a/b"])
def test_valid_identities_are_kept_exactly(value):
    assert check_identity("tenant_id", value) == value


@pytest.mark.parametrize("value", ["", " ", "\t\n", "t" * 129, "a\x00", "a\x1f", "a\x7f",
                                   "a\x85", "a\u2028", "\ud800", None, b"bytes"])
def test_invalid_identities(value):
    with pytest.raises(InvalidField) as info:
        check_identity("idempotency_key", value)
    assert info.value.field == "idempotency_key"


def test_not_before_must_be_aware():
    aware = datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=3)))
    assert check_not_before(aware) is aware
    assert check_not_before(None) is None
    for bad in (datetime(2030, 1, 1), "2030-01-01T00:00:00Z", 1_900_000_000):
        with pytest.raises(InvalidField) as info:
            check_not_before(bad)
        assert info.value.field == "not_before"


def test_dispatch_defaults_and_type():
    dispatch = Dispatch("reports", "tenant")
    assert dispatch.idempotency_key is None and dispatch.not_before is None
    # None: the job type's priority, else NORMAL (caravel_lite.job_options).
    assert dispatch.priority is None
    assert check_dispatch(dispatch) is dispatch
    with pytest.raises(InvalidField) as info:
        check_dispatch({"queue": "reports", "tenant_id": "t"})
    assert info.value.field == "dispatch"


def test_priorities_order_critical_first():
    assert sorted([Priority.LOW, Priority.NORMAL, Priority.CRITICAL, Priority.HIGH]) == [
        Priority.CRITICAL, Priority.HIGH, Priority.NORMAL, Priority.LOW]


def test_a_reused_dispatch_is_checked_once_and_others_still_in_full():
    from caravel_lite import validation

    valid = Dispatch(queue="reused", tenant_id="t")
    assert validation.check_dispatch(valid) is valid
    assert validation._last_valid is valid
    assert validation.check_dispatch(valid) is valid
    with pytest.raises(InvalidField) as refused:
        validation.check_dispatch(Dispatch(queue="reused", tenant_id=" "))
    assert refused.value.field == "tenant_id"
    assert validation._last_valid is valid  # an invalid one never replaces it


@pytest.mark.parametrize("prefix, low, high", [
    ("01a233a4", "01a233a4-0000-0000-0000-000000000000", "01a233a4-ffff-ffff-ffff-ffffffffffff"),
    ("01A233A4-1B2", "01a233a4-1b20-0000-0000-000000000000",
     "01a233a4-1b2f-ffff-ffff-ffffffffffff"),
    ("01a233a41b2f7001a4d58c5fb751ac05", "01a233a4-1b2f-7001-a4d5-8c5fb751ac05",
     "01a233a4-1b2f-7001-a4d5-8c5fb751ac05"),
])
def test_an_id_prefix_is_the_range_of_canonical_ids_it_begins(prefix, low, high):
    assert prefix_bounds(prefix) == (low, high)


@pytest.mark.parametrize("prefix", ["", "-", "g1", "0" * 33, None, 12])
def test_what_is_not_the_beginning_of_an_id_is_refused(prefix):
    with pytest.raises(InvalidField) as caught:
        prefix_bounds(prefix)
    assert caught.value.field == "prefix"
