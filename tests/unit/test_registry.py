"""JobRegistry: wire names, job types and handlers (SPEC §1, §3, §4)."""
from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import importlib
import sys
import uuid
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import pytest

from caravel_lite import CaravelError, InvalidField, JobContext, JobRegistry, UnknownJobType
from caravel_lite import codec


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


@dataclasses.dataclass(frozen=True)
class Tagged:
    name: str
    tags: Set[str]


@dataclasses.dataclass(frozen=True)
class Inner:
    blob: bytes


@dataclasses.dataclass(frozen=True)
class Outer:
    items: List[Optional[Inner]]


@dataclasses.dataclass(frozen=True)
class IntKeys:
    counts: Dict[int, str]


@dataclasses.dataclass
class Derived:
    n: int
    double: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.double = self.n * 2


@dataclasses.dataclass(frozen=True)
class Node:
    """A recursive type is fine: each field's annotation has a rule."""
    value: int
    children: List["Node"] = dataclasses.field(default_factory=list)


@pytest.mark.parametrize("job_type, named", [
    (Tagged, "field Tagged.tags: typing.Set[str] cannot be stored"),
    (Outer, "field Outer.items.blob: bytes cannot be stored"),
    (IntKeys, "field IntKeys.counts: typing.Dict[int, str] cannot be stored"),
    (Derived, "field Derived.double has init=False"),
])
def test_a_type_the_codec_cannot_store_is_refused_at_registration_naming_the_field(
        job_type, named):
    registry = JobRegistry()
    with pytest.raises(InvalidField) as caught:
        registry.register("odd.type.v1", job_type, handle)
    assert caught.value.field == "job_type"
    assert named in str(caught.value)
    assert "odd.type.v1" not in registry  # nothing registered
    with pytest.raises(UnknownJobType):
        registry.for_type(job_type)


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass(frozen=True)
class Everything:
    a: str
    b: int
    c: float
    d: bool
    e: Optional[uuid.UUID]
    f: decimal.Decimal
    g: datetime.datetime
    h: datetime.date
    i: Colour
    j: List[Dict[str, Tuple[int, ...]]]
    k: Tuple[int, str]
    m: Union[int, str, None]
    n: Any
    o: list
    p: Node


def test_every_supported_annotation_registers():
    assert JobRegistry().register("everything.v1", Everything, handle).job_type is Everything
    assert JobRegistry().register("node.v1", Node, handle).job_type is Node


def test_annotations_that_never_resolve_are_refused_at_the_first_job():
    @dataclasses.dataclass(frozen=True)
    class Local:  # with postponed annotations, "Colour2" names nothing the module has
        colour: "Colour2"  # noqa: F821

    registry = JobRegistry()
    registry.register("local.v1", Local, handle)  # it might be defined further down
    with pytest.raises(InvalidField) as caught:
        registry.for_job(Local("red"))
    assert caught.value.field == "job_type"
    assert "Local: its annotations do not resolve (NameError)" in str(caught.value)


USER_MODULE = """
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import caravel_lite as cl

registry = cl.JobRegistry()


@dataclass(frozen=True)
class Report:
    rows: List[Row]
    parent: Optional[Report] = None


@registry.job("reports.v1", Report)  # Row is not defined yet
def run_report(job: Report, ctx: cl.JobContext) -> None:
    pass


@dataclass(frozen=True)
class Row:
    n: int
"""


def test_a_forward_reference_to_a_class_defined_after_registration_registers(
        tmp_path, monkeypatch):
    """Types that worked before registration checked them: the annotation resolves by
    the time a job is stored."""
    (tmp_path / "forward_ref_jobs.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "forward_ref_jobs", raising=False)
    module = importlib.import_module("forward_ref_jobs")
    job = module.Report([module.Row(1)], parent=module.Report([]))
    assert module.registry.for_job(job).wire_name == "reports.v1"
    assert codec.decode(module.Report, codec.encode(job)) == job


class Level(enum.Enum):
    NONE = None
    LOW = 1


@dataclasses.dataclass(frozen=True)
class Leveled:
    level: Level


def test_an_enum_with_a_none_value_registers_and_round_trips():
    assert JobRegistry().register("leveled.v1", Leveled, handle).job_type is Leveled
    job = Leveled(Level.NONE)
    assert codec.decode(Leveled, codec.encode(job)) == job
