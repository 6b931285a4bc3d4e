"""prepare_envelope: what enqueue and the outbox accept is exactly what decodes back."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from caravel_lite import Dispatch, InvalidField, JobRegistry, QueueOptions
from caravel_lite.envelope import prepare_envelope

registry = JobRegistry()


@dataclass(eq=False)
class Identity:
    """A job class compared by identity: round-trip equality must use its fields."""

    n: int


@dataclass(frozen=True)
class Loose:
    value: Any


registry.register("unit.identity.v1", Identity, lambda job, ctx: None)
registry.register("unit.loose.v1", Loose, lambda job, ctx: None)
DISPATCH = Dispatch(queue="unit", tenant_id="t")


def test_a_job_class_without_value_equality_is_accepted():
    envelope = prepare_envelope(registry, QueueOptions(), Identity(3), DISPATCH, 0)
    assert envelope.payload == '{"n":3}'


@pytest.mark.parametrize("value", [[1, {"a": None}], "text", 2.5, None])
def test_plain_json_values_under_any_are_accepted(value):
    envelope = prepare_envelope(registry, QueueOptions(), Loose(value), DISPATCH, 0)
    assert envelope.wire_name == "unit.loose.v1"


@pytest.mark.parametrize("value", [uuid.UUID(int=1), (1, 2), {"k": (3,)}])
def test_values_that_would_come_back_different_are_refused(value):
    with pytest.raises(InvalidField) as refused:
        prepare_envelope(registry, QueueOptions(), Loose(value), DISPATCH, 0)
    assert refused.value.field == "payload"
    assert "round-trip" in str(refused.value)
