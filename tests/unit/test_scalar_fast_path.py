"""The fast paths for flat jobs of scalars. codec.encode_scalars (enqueue): whenever it
answers, it answers exactly what the general encode-decode-compare proof would (the
same text), and it declines every job the general path must judge. codec.decode
(the worker): the same job or the same refusal as the general decoder."""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import InitVar, dataclass, field
from typing import Any, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caravel_lite import InvalidField
from caravel_lite.codec import (PayloadDecodeError, _decode_dataclass, _decode_scalars,
                                 _scalar_plan, decode, encode, encode_scalars)
from caravel_lite.envelope import _prove_round_trip


@dataclass(frozen=True)
class Flat:
    s: str
    i: int
    f: float
    b: bool
    o: Optional[int]
    a: Any


@dataclass
class Bumping:
    """Each construction changes the value, so a decoded copy never equals the job."""

    n: int

    def __post_init__(self):
        self.n += 1


@dataclass
class Counted:
    n: int
    seen: int = field(default=0, init=False)


@dataclass
class WithInitVar:
    n: int
    scale: InitVar[int] = 1


@dataclass
class Nested:
    inner: Flat


def _general(job_type, job) -> str:
    """The general path: encode, then decode and compare (raises InvalidField)."""
    payload = encode(job)
    _prove_round_trip(job_type, job, payload)
    return payload


anything = (st.none() | st.booleans() | st.integers() | st.floats() | st.text()
            | st.lists(st.integers(), max_size=2))


@settings(max_examples=400, deadline=None)
@given(s=st.text() | st.integers(), i=st.integers() | st.booleans() | st.floats(),
       f=st.floats() | st.integers(), b=st.booleans() | st.integers(0, 1),
       o=st.none() | st.integers() | st.text(max_size=2), a=anything)
def test_the_fast_path_agrees_with_the_general_proof(s, i, f, b, o, a):
    job = Flat(s, i, f, b, o, a)
    fast = encode_scalars(Flat, job)
    if fast is None:
        return  # declined: the general path decides, as it always did
    assert fast == _general(Flat, job)
    assert decode(Flat, fast) == job


def test_a_flat_job_takes_the_fast_path_with_the_canonical_text():
    job = Flat("x\u00e9", 3, 2.5, True, None, -0.0)
    # -0.0 is stored as 0.0 on both paths: equal jobs, equal bytes (#11.6).
    assert encode_scalars(Flat, job) == encode(job) == \
        '{"a":0.0,"b":true,"f":2.5,"i":3,"o":null,"s":"x\u00e9"}'


@pytest.mark.parametrize("job", [
    Flat("x", True, 1.0, True, None, None),        # a bool is not an int here
    Flat("x", 1, 1, True, None, None),             # an int under float decodes as float
    Flat("x", 1, math.nan, True, None, None),      # not valid JSON
    Flat("x", 1, 1.0, True, None, math.inf),
    Flat("\ud800", 1, 1.0, True, None, None),      # a lone surrogate
    Flat("x", 1, 1.0, True, None, [1]),            # a container under Any
    Flat("x", 1, 1.0, True, "1", None),            # wrong type in an Optional
])
def test_values_the_annotation_does_not_restore_exactly_are_declined(job):
    assert encode_scalars(Flat, job) is None


def test_a_post_init_that_changes_values_is_left_to_the_general_proof():
    job = Bumping(1)
    assert encode_scalars(Bumping, job) is None
    with pytest.raises(InvalidField, match="round-trip"):
        _general(Bumping, job)


@dataclass
class Doubling:
    """A constructor of its own (kept by @dataclass): it changes the value."""

    n: int

    def __init__(self, n: int) -> None:
        self.n = n * 2


@dataclass
class Marking:
    """An assignment hook of its own: every store appends a mark."""

    s: str

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value + "!")


@dataclass(frozen=True)
class NeverEqual:
    n: int

    def __eq__(self, other: object) -> bool:
        return False


class Recycling:
    """A __new__ of its own, which hands back one shared instance."""

    shared: Any = None

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls.shared is None:
            cls.shared = super().__new__(cls)
        return cls.shared


@dataclass
class Shared(Recycling):
    n: int


class Doubled:
    """A data descriptor as a field's class attribute: stores twice the value."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = "_" + name

    def __get__(self, obj: Any, owner: type) -> Any:
        return 0 if obj is None else getattr(obj, self.name)

    def __set__(self, obj: Any, value: int) -> None:
        setattr(obj, self.name, value * 2)


@dataclass
class ThroughDescriptor:
    n: int = Doubled()  # type: ignore[assignment]


class Bumped(type):
    """A metaclass whose construction changes the arguments."""

    def __call__(cls, **kwargs: Any) -> Any:
        return super().__call__(**{key: value + 1 for key, value in kwargs.items()})


@dataclass
class BuiltByMetaclass(metaclass=Bumped):
    n: int


class Exclaiming:
    """A base whose attribute reads change what a field shows."""

    def __getattribute__(self, name: str) -> Any:
        value = object.__getattribute__(self, name)
        return value + "!" if name == "s" else value


@dataclass
class ReadThroughHook(Exclaiming):
    s: str


def test_a_plain_dataclass_is_not_rebuilt_to_prove_what_its_construction_guarantees():
    # @dataclass's own __init__ and __eq__ only store and compare the fields: the text
    # is the general path's, with no trial construction.
    assert _scalar_plan(Flat).rebuild is False
    job = Flat("x", 1, 1.0, True, None, "y")
    assert encode_scalars(Flat, job) == _general(Flat, job)


@pytest.mark.parametrize("job_type, job", [
    (Bumping, Bumping(1)), (Doubling, Doubling(1)), (Marking, Marking("a")),
    (NeverEqual, NeverEqual(1)), (Shared, Shared(1)), (ThroughDescriptor, ThroughDescriptor(1)),
    (BuiltByMetaclass, BuiltByMetaclass(n=1)), (ReadThroughHook, ReadThroughHook("a")),
])
def test_a_type_with_construction_or_equality_of_its_own_is_still_rebuilt(job_type, job):
    assert _scalar_plan(job_type).rebuild is True
    if job_type is Shared:
        # The shared instance comes back (equal to itself): proven by the rebuild.
        assert encode_scalars(job_type, job) == encode(job)
    else:
        assert encode_scalars(job_type, job) is None  # the rebuilt job differs


@pytest.mark.parametrize("job_type, job", [
    (Counted, Counted(1)),
    (WithInitVar, WithInitVar(1)),
    (Nested, Nested(Flat("x", 1, 1.0, True, None, None))),
])
def test_jobs_that_are_not_flat_scalars_are_declined(job_type, job):
    assert encode_scalars(job_type, job) is None


def test_an_instance_of_another_type_is_declined():
    @dataclass(frozen=True)
    class Sub(Flat):
        pass

    assert encode_scalars(Flat, Sub("x", 1, 1.0, True, None, None)) is None
    assert dataclasses.is_dataclass(Sub)


field_values = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=3)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["s", "i", "f", "b", "o", "a", "extra"]),
                       field_values, max_size=7))
def test_decoding_a_flat_job_agrees_with_the_general_decoder(data):
    text = json.dumps(data)

    def general():
        try:
            return _decode_dataclass(Flat, json.loads(text), "$")
        except (PayloadDecodeError, TypeError, ValueError) as exc:
            return type(exc)

    def through_decode():
        try:
            return decode(Flat, text)
        except PayloadDecodeError as exc:
            return type(exc)

    expected, got = general(), through_decode()
    if expected in (TypeError, ValueError):  # decode reports those as decode errors
        expected = PayloadDecodeError
    if isinstance(expected, Flat) and any(v != v for v in dataclasses.astuple(expected)):
        assert repr(got) == repr(expected)  # NaN never equals itself
    else:
        assert got == expected


def test_a_flat_payload_decodes_without_the_general_decoder():
    data = {"a": [1], "b": False, "f": 2.0, "i": 1, "o": None, "s": ""}
    assert _decode_scalars(Flat, data) is None  # a list under Any: the general decoder
    data["a"] = "x"
    assert _decode_scalars(Flat, data) == Flat("", 1, 2.0, False, None, "x")


def test_a_flat_payload_with_an_int_for_a_float_still_decodes_to_a_float():
    job = decode(Flat, '{"a":null,"b":false,"f":2,"i":1,"o":null,"s":""}')
    assert type(job.f) is float and job.f == 2.0
