"""Codec edges through the real enqueue path, on every database (#11.6). One
hypothesis test holds three rules for any job it builds:

1. A job that cannot be stored (an int too long for text, a float field's int too large
   for a float, anything else the codec refuses) raises ``InvalidField("payload")`` and
   writes nothing; never a bare ``ValueError`` or ``OverflowError``.
2. Equal jobs serialize to the same bytes: an equal twin (zeros of the other sign, dict
   entries in another order, an int for an equal float in a float field) enqueued under
   the same key is the same job, not a ``QueueIdempotencyConflict``.
3. No error message and no log line carries payload content: every dict key and every
   string the strategy makes holds a marker that must never show up.
"""
from __future__ import annotations

import logging
import math
import uuid
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pytest

from caravel_lite import DatabaseQueue, Dispatch, InvalidField, JobRegistry, QueueOptions

MARK = "PAYLOADCONTENT"
QUEUE, TENANT = "codec-edges", "tenant-codec"
HUGE = 10 ** 5000  # more digits than Python converts to text (4300 by default)


@dataclass(frozen=True)
class Inner:
    amount: float
    count: int
    note: str


@dataclass(frozen=True)
class Flat:
    count: int
    ratio: float


@dataclass(frozen=True)
class Edge:
    count: int
    ratio: float
    maybe: Optional[float]
    label: str
    data: Dict[str, Any]
    scores: Dict[str, float]
    items: List[Inner]


registry = JobRegistry()
registry.register("tests.codec.edge.v1", Edge, lambda job, ctx: None)
registry.register("tests.codec.flat.v1", Flat, lambda job, ctx: None)

class Big(int):
    """An int that hypothesis can print when it reports an example (repr of a plain int
    this long raises ValueError); to the codec it is an int like any other."""

    def __repr__(self) -> str:
        return f"<int of {self.bit_length()} bits>"


texts = st.text(max_size=4).map(lambda text: MARK + text)
ints = (st.integers() | st.integers(-10 ** 1200, 10 ** 1200)
        | st.sampled_from([5000, 400, 1300]).flatmap(
            lambda digits: st.sampled_from([Big(10 ** digits), Big(-10 ** digits)])))
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from([0.0, -0.0])
# Values the codec refuses, so that refusals under dict keys are exercised too.
refused = st.sampled_from([math.nan, math.inf]) | st.builds(object)
anything = st.recursive(st.none() | st.booleans() | ints | floats | texts | refused,
                        lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(texts, inner, max_size=3),
                        max_leaves=8)
numbers = floats | ints  # what a float field may be given
edges = st.builds(Edge, count=ints, ratio=numbers, maybe=st.none() | numbers, label=texts,
                  data=st.dictionaries(texts, anything, max_size=3),
                  scores=st.dictionaries(texts, numbers, max_size=3),
                  items=st.lists(st.builds(Inner, numbers, ints, texts), max_size=2))


def too_long(value: Any) -> bool:
    """Whether ``value`` holds an int that Python cannot write as text."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            str(value)
        except ValueError:
            return True
        return False
    if isinstance(value, dict):
        return any(too_long(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(too_long(v) for v in value)
    if isinstance(value, (Edge, Inner)):
        return any(too_long(v) for v in vars(value).values())
    return False


def flip_zeros(value: Any) -> Any:
    """The same data with every float zero of the other sign and dicts reversed."""
    if isinstance(value, float):
        return math.copysign(0.0, -math.copysign(1.0, value)) if value == 0 else value
    if isinstance(value, dict):
        return {k: flip_zeros(v) for k, v in reversed(list(value.items()))}
    if isinstance(value, list):
        return [flip_zeros(v) for v in value]
    return value


def other_number(value: Any) -> Any:
    """An equal value of the other numeric type, for a float field, where it exists."""
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        return flip_zeros(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            as_float = float(value)
        except OverflowError:
            return value
        return as_float if as_float == value else value
    return value


def twin_of(job: Edge) -> Edge:
    return replace(job, ratio=other_number(job.ratio),
                   maybe=other_number(job.maybe),
                   data=flip_zeros(job.data),
                   scores={k: other_number(v) for k, v in reversed(list(job.scores.items()))},
                   items=[replace(item, amount=other_number(item.amount)) for item in job.items])


def count_rows(db) -> int:
    return db.execute_sql("SELECT COUNT(*) FROM caravel_jobs").fetchone()[0]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(job=edges)
def test_refused_jobs_write_nothing_equal_jobs_store_equal_bytes_and_nothing_leaks(
        db, caplog, job):
    queue = DatabaseQueue(db, registry, QueueOptions(max_payload_bytes=1024 * 1024))
    key = f"edge-{uuid.uuid4().hex}"
    before = count_rows(db)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="caravel_lite"):
        try:
            first = queue.enqueue(job, Dispatch(QUEUE, TENANT, key))
        except InvalidField as exc:
            assert exc.field == "payload"
            assert MARK not in str(exc), str(exc)
            assert count_rows(db) == before
            refused = True
        else:
            refused = False
            twin = twin_of(job)
            assert twin == job
            again = queue.enqueue(twin, Dispatch(QUEUE, TENANT, key))
            assert again.already_enqueued and again.job_id == first.job_id
            assert count_rows(db) == before + 1
    if too_long(job):
        assert refused, "an int too long for text was accepted"
    assert MARK not in caplog.text


@pytest.mark.parametrize("field, job, path", [
    ("count", lambda e: replace(e, count=HUGE), "$.count"),
    ("in a list", lambda e: replace(e, items=[Inner(1.0, 1, "n"), Inner(1.0, HUGE, "n")]),
     "$.items[1].count"),
    ("a float field", lambda e: replace(e, ratio=10 ** 400), "$.ratio"),
    ("under a key", lambda e: replace(e, data={MARK + "-alice@example.com": HUGE}),
     "$.data[#0]"),
])
def test_the_error_names_the_path_by_fields_and_positions_only(db, field, job, path):
    base = Edge(1, 1.0, None, "label", {}, {}, [])
    queue = DatabaseQueue(db, registry)
    with pytest.raises(InvalidField) as raised:
        queue.enqueue(job(base), Dispatch(QUEUE, TENANT, "path-key"))
    assert raised.value.field == "payload"
    assert path in str(raised.value) and MARK not in str(raised.value)
    assert count_rows(db) == 0


def test_zero_and_negative_zero_are_one_job(db):
    queue = DatabaseQueue(db, registry)
    positive = Edge(0, 0.0, 0.0, "z", {"v": 0.0}, {"s": 0.0}, [Inner(0.0, 0, "n")])
    negative = Edge(0, -0.0, -0.0, "z", {"v": -0.0}, {"s": -0.0}, [Inner(-0.0, 0, "n")])
    first = queue.enqueue(positive, Dispatch(QUEUE, TENANT, "zero"))
    second = queue.enqueue(negative, Dispatch(QUEUE, TENANT, "zero"))
    assert second.already_enqueued and second.job_id == first.job_id
    # Also in the other order, and for the fast path's flat jobs.
    third = queue.enqueue(replace(negative, label="y"), Dispatch(QUEUE, TENANT, "zero-2"))
    fourth = queue.enqueue(replace(positive, label="y"), Dispatch(QUEUE, TENANT, "zero-2"))
    assert fourth.already_enqueued and fourth.job_id == third.job_id


@pytest.mark.parametrize("job, path", [(Flat(HUGE, 1.0), "$.count"), (Flat(1, 10 ** 400), "$.ratio"),
                                       (Flat(1, -0.0), None)])
def test_a_flat_job_of_scalars_follows_the_same_rules(db, job, path):
    queue = DatabaseQueue(db, registry)
    if path is None:
        first = queue.enqueue(job, Dispatch(QUEUE, TENANT, "flat"))
        assert queue.enqueue(Flat(1, 0.0), Dispatch(QUEUE, TENANT, "flat")).job_id == first.job_id
        return
    with pytest.raises(InvalidField) as raised:
        queue.enqueue(job, Dispatch(QUEUE, TENANT, "flat"))
    assert raised.value.field == "payload" and path in str(raised.value)
    assert count_rows(db) == 0
