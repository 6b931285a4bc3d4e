"""Canonical JSON payloads and typed decoding (SPEC §4), without a database."""
from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import uuid
from typing import Any, Dict, List, Optional, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caravel_lite import InvalidField
from caravel_lite.codec import MAX_DEPTH, PayloadDecodeError, decode, encode, utf8_size


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass(frozen=True)
class Leaf:
    when: dt.datetime
    day: dt.date
    note: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class Tree:
    ident: uuid.UUID
    amount: decimal.Decimal
    leaf: Leaf
    color: Color
    level: Level
    tags: List[str]
    scores: Dict[str, float]
    pair: Tuple[int, str]
    maybe_leaf: Optional[Leaf]
    leaves: List[Leaf]
    anything: Any
    bare_list: list
    bare_dict: dict
    flag: bool = False
    ratio: float = 0.5


def _tree(**changes) -> Tree:
    values = dict(
        ident=uuid.UUID("12345678-1234-5678-1234-567812345678"),
        amount=decimal.Decimal("12.340"),
        leaf=Leaf(dt.datetime(2030, 1, 2, 3, 4, 5, 678_901, tzinfo=dt.timezone.utc),
                  dt.date(2030, 2, 3)),
        color=Color.BLUE, level=Level.HIGH, tags=["a", "b"], scores={"x": 1.25},
        pair=(7, "seven"), maybe_leaf=None,
        leaves=[Leaf(dt.datetime(2031, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
                     dt.date(2031, 1, 1), "n")],
        anything={"nested": [1, "two", None]}, bare_list=[1, [2, 3]],
        bare_dict={"k": {"v": True}})
    values.update(changes)
    return Tree(**values)


@dataclasses.dataclass(frozen=True)
class TypingBare:
    items: List
    table: Dict
    row: Tuple


def test_typings_bare_list_dict_and_tuple_hold_anything_as_the_builtins_do():
    job = TypingBare([1, "a"], {"k": [None]}, (1, "two", 3.0))
    assert decode(TypingBare, encode(job)) == job


def test_nested_dataclasses_and_every_supported_type_round_trip():
    tree = _tree()
    decoded = decode(Tree, encode(tree))
    assert decoded == tree
    assert isinstance(decoded.ident, uuid.UUID)
    assert decoded.amount == decimal.Decimal("12.340") and str(decoded.amount) == "12.340"
    assert decoded.color is Color.BLUE and decoded.level is Level.HIGH
    assert decoded.leaf.when.utcoffset() is not None
    assert decoded.leaves[0].when == tree.leaves[0].when  # the same instant
    assert decoded.pair == (7, "seven")
    assert decode(Tree, encode(_tree(maybe_leaf=tree.leaf))).maybe_leaf == tree.leaf


def test_encoding_is_canonical():
    text = encode(_tree())
    assert text == encode(_tree())
    parsed = json.loads(text)
    assert list(parsed) == sorted(parsed)  # sorted keys
    assert ", " not in text and ": " not in text  # no insignificant spaces
    # the same instant in another offset encodes the same way (as UTC)
    here = dt.datetime(2030, 1, 1, 12, tzinfo=dt.timezone.utc)
    there = here.astimezone(dt.timezone(dt.timedelta(hours=9)))
    assert encode(Leaf(here, dt.date(2030, 1, 1))) == encode(Leaf(there, dt.date(2030, 1, 1)))
    # non-ASCII text is stored as UTF-8, not escaped; the size counts bytes
    text = encode(Leaf(here, dt.date(2030, 1, 1), "é€"))
    assert "é€" in text and utf8_size(text) == len(text) + 1 + 2


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"),
                                   decimal.Decimal("NaN"), decimal.Decimal("Infinity")])
def test_non_finite_numbers_are_rejected(value):
    with pytest.raises(InvalidField) as info:
        encode(_tree(anything=value))
    assert info.value.field == "payload"


def test_naive_datetimes_are_rejected():
    with pytest.raises(InvalidField) as info:
        encode(Leaf(dt.datetime(2030, 1, 1), dt.date(2030, 1, 1)))
    assert info.value.field == "payload" and "naive" in str(info.value)


@pytest.mark.parametrize("value", [{1: "a"}, {"a", "b"}, b"bytes", object()])
def test_unsupported_values_are_rejected(value):
    with pytest.raises(InvalidField):
        encode(_tree(anything=value))


def test_a_non_dataclass_job_is_rejected():
    with pytest.raises(InvalidField) as info:
        encode({"a": 1})
    assert info.value.field == "job"
    with pytest.raises(InvalidField):
        encode(Tree)  # the class itself


def _nest(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


@dataclasses.dataclass
class Holder:
    value: Any


def test_depth_limit_counts_json_nesting():
    assert MAX_DEPTH == 32
    ok = encode(Holder(_nest(31)))  # the object plus 31 arrays
    depth, deepest = 0, 0
    for char in ok:
        depth += char in "[{"
        depth -= char in "]}"
        deepest = max(deepest, depth)
    assert deepest == 32
    assert decode(Holder, ok) == Holder(_nest(31))
    with pytest.raises(InvalidField) as info:
        encode(Holder(_nest(32)))
    assert info.value.field == "payload"


@dataclasses.dataclass
class Small:
    count: int
    name: str = "x"


@pytest.mark.parametrize("text", [
    '{"count": true}', '{"count": 1.5}', '{"count": "1"}', '{"count": null}',
    '[1]', '"text"', '{"count": 1, "extra": 2}', '{}', '{"count": 1, "name": 3}',
    'not json', '{"count": 1',
])
def test_wrong_shapes_fail_to_decode_without_echoing_values(text):
    with pytest.raises(PayloadDecodeError) as info:
        decode(Small, text)
    assert isinstance(info.value, ValueError)
    assert "extra" not in str(info.value) or "unexpected" in str(info.value)
    assert "1.5" not in str(info.value)


def test_decoding_uses_only_the_registered_type():
    @dataclasses.dataclass
    class Target:
        inner: Small

    # A payload that names a class gets no special treatment: it is just a field.
    with pytest.raises(PayloadDecodeError):
        decode(Target, '{"inner": {"count": 1, "__class__": "os.system"}}')
    assert decode(Target, '{"inner": {"count": 1}}') == Target(Small(1))


def test_defaults_fill_missing_optional_fields():
    assert decode(Small, '{"count": 3}') == Small(3)
    assert decode(Leaf, '{"when": "2030-01-01T00:00:00+00:00", "day": "2030-01-01"}').note is None


def test_naive_datetime_in_stored_payload_is_invalid():
    with pytest.raises(PayloadDecodeError):
        decode(Leaf, '{"when": "2030-01-01T00:00:00", "day": "2030-01-01"}')


def test_constructor_refusal_is_a_decode_error():
    @dataclasses.dataclass
    class Positive:
        n: int

        def __post_init__(self):
            if self.n <= 0:
                raise ValueError("must be positive")

    with pytest.raises(PayloadDecodeError):
        decode(Positive, '{"n": -1}')


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20)


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_plain_json_values_round_trip_canonically(value):
    text = encode(Holder(value))
    assert decode(Holder, text) == Holder(value)
    assert encode(decode(Holder, text)) == text


@dataclasses.dataclass(frozen=True)
class Scores:
    scores: Dict[str, float]


def test_decode_errors_name_dict_entries_by_position_never_by_key():
    with pytest.raises(PayloadDecodeError) as raised:
        decode(Scores, '{"scores": {"fine": 1.5, "alice@example.com": "not a number"}}')
    assert "$.scores[#1]" in str(raised.value)
    assert "alice" not in str(raised.value)


def test_decode_refuses_a_stored_int_too_large_for_a_float_field():
    with pytest.raises(PayloadDecodeError, match=r"\$\.scores\[#0\]"):
        decode(Scores, '{"scores": {"k": 1' + "0" * 400 + '}}')
