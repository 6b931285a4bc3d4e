"""JobRegistry: wire names, job types and handlers (SPEC §1, §3, §4)."""
from __future__ import annotations

import dataclasses

import pytest

from caravel_lite import CaravelError, InvalidField, JobContext, JobRegistry, UnknownJobType


@dataclasses.dataclass(frozen=True)
class Report:
    report_id: str


@dataclasses.dataclass(frozen=True)
class Email:
    to: str


def handle(job, ctx: JobContext) -> None:
    return None


async def handle_async(job, ctx: JobContext) -> None:
    return None


def test_register_and_decorator_forms():
    registry = JobRegistry()
    definition = registry.register("reports.generate.v1", Report, handle)
    assert definition.wire_name == "reports.generate.v1" and definition.job_type is Report
    assert definition.is_async is False

    @registry.job("mail.send_v2", Email)
    async def send(job, ctx):
        return None

    assert send.__name__ == "send"  # the decorator returns the handler unchanged
    assert registry.for_name("mail.send_v2").is_async is True
    assert registry.for_job(Report("r")).wire_name == "reports.generate.v1"
    assert registry.names() == ["mail.send_v2", "reports.generate.v1"]
    assert "mail.send_v2" in registry and "mail.send.v3" not in registry


def test_unknown_names_and_types():
    registry = JobRegistry()
    registry.register("reports.generate.v1", Report, handle)
    assert registry.for_name("reports.generate.v2") is None
    assert registry.for_name("builtins.object") is None
    with pytest.raises(UnknownJobType) as info:
        registry.for_job(Email("x"))
    assert isinstance(info.value, LookupError) and isinstance(info.value, CaravelError)


def test_a_name_or_a_type_registers_once():
    registry = JobRegistry()
    registry.register("reports.generate.v1", Report, handle)
    with pytest.raises(InvalidField) as info:
        registry.register("reports.generate.v1", Email, handle)
    assert info.value.field == "wire_name"
    with pytest.raises(InvalidField) as info:
        registry.register("reports.generate.v2", Report, handle)
    assert info.value.field == "job_type"
    assert registry.names() == ["reports.generate.v1"]


@pytest.mark.parametrize("name", ["", "Reports.v1", "reports v1", "reports/v1", "r" * 129,
                                  "répört", "reports:v1", None, 1])
def test_invalid_wire_names_are_rejected(name):
    with pytest.raises(InvalidField) as info:
        JobRegistry().register(name, Report, handle)
    assert info.value.field == "wire_name"


@pytest.mark.parametrize("name", ["a", "r" * 128, "a.b-c_d.0"])
def test_valid_wire_names(name):
    assert JobRegistry().register(name, Report, handle).wire_name == name


def test_job_type_and_handler_are_checked():
    with pytest.raises(InvalidField) as info:
        JobRegistry().register("a.v1", dict, handle)
    assert info.value.field == "job_type"
    with pytest.raises(InvalidField) as info:
        JobRegistry().register("a.v1", Report("x"), handle)  # an instance, not a type
    assert info.value.field == "job_type"
    with pytest.raises(InvalidField) as info:
        JobRegistry().register("a.v1", Report, "not callable")
    assert info.value.field == "handler"


def test_async_handler_is_detected():
    assert JobRegistry().register("a.v1", Report, handle_async).is_async is True
