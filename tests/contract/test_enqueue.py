"""Enqueue: validation before SQL, idempotency in every state, tenant and key exactness,
the caller's transaction, payload limits (SPEC §2, §4)."""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from caravel_lite import (CaravelError, Failure, InvalidField, JobState, Priority,
                          QueueIdempotencyConflict, UnknownJobType)
from caravel_lite.codec import encode
from caravel_lite.testing import ManualClock
from tests.contract.jobs import (QUEUE, TENANT, Blob, Nested, Other, Ping, dispatch,
                                 make_queue, nested_list, row, row_count)

MIB = 1024 * 1024


@dataclass(frozen=True)
class Unregistered:
    n: int


# (description, job, dispatch keyword overrides, field the error must name)
INVALID = [
    ("empty queue", Ping(1), {"queue": ""}, "queue"),
    ("queue too long", Ping(1), {"queue": "q" * 65}, "queue"),
    ("queue upper case", Ping(1), {"queue": "Contract"}, "queue"),
    ("queue with space", Ping(1), {"queue": "contract "}, "queue"),
    ("queue with slash", Ping(1), {"queue": "a/b"}, "queue"),
    ("queue not str", Ping(1), {"queue": 7}, "queue"),
    ("tenant None", Ping(1), {"tenant": None}, "tenant_id"),
    ("tenant empty", Ping(1), {"tenant": ""}, "tenant_id"),
    ("tenant blank", Ping(1), {"tenant": "   "}, "tenant_id"),
    ("tenant too long", Ping(1), {"tenant": "t" * 129}, "tenant_id"),
    ("tenant newline", Ping(1), {"tenant": "a\nb"}, "tenant_id"),
    ("tenant NUL", Ping(1), {"tenant": "a\x00b"}, "tenant_id"),
    ("tenant DEL", Ping(1), {"tenant": "a\x7fb"}, "tenant_id"),
    ("key empty", Ping(1), {"key": ""}, "idempotency_key"),
    ("key blank", Ping(1), {"key": " \t "}, "idempotency_key"),
    ("key too long", Ping(1), {"key": "k" * 129}, "idempotency_key"),
    ("key control", Ping(1), {"key": "k\x1bx"}, "idempotency_key"),
    ("key not str", Ping(1), {"key": 12}, "idempotency_key"),
    ("naive not_before", Ping(1), {"not_before": datetime(2030, 1, 1)}, "not_before"),
    ("not_before not datetime", Ping(1), {"not_before": "2030-01-01"}, "not_before"),
    ("priority int", Ping(1), {"priority": 2}, "priority"),
    ("payload too big", Blob("x" * 70_000), {}, "payload"),
    ("payload NaN", Nested(float("nan")), {}, "payload"),
    ("payload naive datetime", Nested(datetime(2030, 1, 1)), {}, "payload"),
    ("payload too deep", Nested(nested_list(32)), {}, "payload"),
    ("payload non-str key", Nested({1: "a"}), {}, "payload"),
    ("payload wrong type for field", Ping("1"), {}, "payload"),
]


@pytest.mark.parametrize("case", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_input_names_the_field_and_writes_nothing(db, case):
    _, job, overrides, field = case
    queue = make_queue(db)
    with pytest.raises(ValueError) as info:
        queue.enqueue(job, dispatch(**overrides))
    assert isinstance(info.value, CaravelError) and isinstance(info.value, InvalidField)
    assert info.value.field == field
    assert field in str(info.value)
    assert row_count(db) == 0


@pytest.mark.parametrize("job", [Unregistered(1), {"n": 1}], ids=["dataclass", "dict"])
def test_unregistered_job_type_is_a_lookup_error_and_writes_nothing(db, job):
    queue = make_queue(db)
    with pytest.raises(UnknownJobType) as info:
        queue.enqueue(job, dispatch("k"))
    assert isinstance(info.value, CaravelError) and isinstance(info.value, LookupError)
    assert row_count(db) == 0


def test_boundary_lengths_are_accepted(db):
    queue = make_queue(db)
    result = queue.enqueue(Ping(1), dispatch("k" * 128, queue="q" * 64, tenant="t" * 128))
    status = queue.status(result.job_id, "q" * 64, "t" * 128)
    assert status is not None and status.tenant_id == "t" * 128
    assert row(db, result.job_id)["idempotency_key"] == "k" * 128


# -- idempotency ----------------------------------------------------------------------

def _to_state(queue, clock, job_id, state):
    if state == JobState.PENDING:
        return
    if state == JobState.CANCELLED:  # keeps its idempotency key too
        assert queue.cancel(job_id, QUEUE, TENANT)
        return
    if state == JobState.HELD:  # a chain's later step (only a first step has a key)
        queue.db.execute_sql(f"UPDATE caravel_jobs SET state = 'held' "
                             f"WHERE id = {queue.db.param}", (str(job_id),))
        return
    lease = queue.claim(QUEUE)
    assert lease is not None and lease.job_id == job_id
    if state == JobState.COMPLETED:
        assert queue.complete(lease)
    elif state == JobState.DEAD_LETTER:
        assert queue.fail(lease, Failure.HANDLER_FAILED)


@pytest.mark.parametrize("state", list(JobState), ids=[s.name for s in JobState])
def test_repeat_enqueue_returns_original_in_every_state_without_changing_it(db, state):
    clock = ManualClock()
    queue = make_queue(db, clock, max_attempts=1)
    first = queue.enqueue(Ping(1), dispatch("order-1"))
    assert first.already_enqueued is False
    clock.advance(timedelta(seconds=1))
    _to_state(queue, clock, first.job_id, state)
    before = row(db, first.job_id)
    assert before["state"] == state.value
    clock.advance(timedelta(seconds=30))
    again = queue.enqueue(Ping(1), dispatch("order-1", not_before=clock() + timedelta(hours=1)))
    assert again.job_id == first.job_id and again.already_enqueued is True
    assert row(db, first.job_id) == before
    assert row_count(db) == 1
    # A different payload or a different wire name with the same key is a conflict and
    # changes nothing either.
    with pytest.raises(QueueIdempotencyConflict) as info:
        queue.enqueue(Ping(2), dispatch("order-1"))
    assert isinstance(info.value, CaravelError)
    with pytest.raises(QueueIdempotencyConflict):
        queue.enqueue(Other(1), dispatch("order-1"))  # same JSON text, other wire name
    assert row(db, first.job_id) == before
    assert row_count(db) == 1


def test_same_key_under_another_tenant_or_queue_is_another_job(db):
    queue = make_queue(db)
    ids = {
        queue.enqueue(Ping(1), dispatch("k")).job_id,
        queue.enqueue(Ping(1), dispatch("k", tenant="tenant-b")).job_id,
        queue.enqueue(Ping(1), dispatch("k", queue="contract-2")).job_id,
    }
    assert len(ids) == 3
    assert row_count(db) == 3


def test_keys_and_tenants_compare_exactly(db):
    """Case and trailing spaces make a different key (MariaDB's default collation
    would call them equal)."""
    queue = make_queue(db)
    results = [queue.enqueue(Ping(1), dispatch(key))
               for key in ("order-1", "ORDER-1", "order-1 ", " order-1")]
    results += [queue.enqueue(Ping(1), dispatch("order-1", tenant=tenant))
                for tenant in ("TENANT-A", "tenant-a ", "Tenant-A")]
    assert all(not r.already_enqueued for r in results)
    assert len({r.job_id for r in results}) == len(results)
    assert row_count(db) == len(results)
    stored = {row(db, r.job_id)["idempotency_key"] for r in results[:4]}
    assert stored == {"order-1", "ORDER-1", "order-1 ", " order-1"}


def test_none_key_always_creates_a_new_job(db):
    queue = make_queue(db)
    results = [queue.enqueue(Ping(1), dispatch(None)) for _ in range(3)]
    assert len({r.job_id for r in results}) == 3
    assert not any(r.already_enqueued for r in results)
    assert row_count(db) == 3


# -- the caller's transaction -----------------------------------------------------------

def test_enqueue_in_rolled_back_transaction_leaves_nothing(db):
    queue = make_queue(db)
    with db.atomic() as txn:
        queue.enqueue(Ping(1), dispatch("k"))
        assert row_count(db) == 1
        txn.rollback()
    assert row_count(db) == 0
    assert queue.claim(QUEUE) is None


def test_enqueue_in_committed_transaction_is_claimable(db, connect):
    queue = make_queue(db)
    other = make_queue(connect())
    with db.atomic():
        result = queue.enqueue(Ping(1), dispatch("k"))
    lease = other.claim(QUEUE)
    assert lease is not None and lease.job_id == result.job_id


def test_duplicate_key_inside_callers_transaction_leaves_it_usable(db):
    queue = make_queue(db)
    first = queue.enqueue(Ping(1), dispatch("k"))
    with db.atomic():
        again = queue.enqueue(Ping(1), dispatch("k"))
        assert again == type(again)(first.job_id, True)
        with pytest.raises(QueueIdempotencyConflict):
            queue.enqueue(Ping(9), dispatch("k"))
        # More work in the same transaction after both errors, then commit.
        later = queue.enqueue(Ping(2), dispatch("k2"))
        db.execute_sql("SELECT COUNT(*) FROM caravel_jobs").fetchone()
    assert row_count(db) == 2
    assert queue.status(later.job_id, QUEUE, TENANT).state == JobState.PENDING


# -- payload limits ---------------------------------------------------------------------

def test_payload_of_exactly_the_limit_is_accepted_and_one_more_byte_is_not(db):
    limit = 1000
    queue = make_queue(db, max_payload_bytes=limit)
    overhead = len(encode(Blob("")).encode("utf-8"))
    # Two-byte characters: the limit counts UTF-8 bytes, not characters.
    text = "é" * ((limit - overhead) // 2) + "x" * ((limit - overhead) % 2)
    assert len(encode(Blob(text)).encode("utf-8")) == limit
    accepted = queue.enqueue(Blob(text), dispatch())
    with pytest.raises(InvalidField) as info:
        queue.enqueue(Blob(text + "x"), dispatch())
    assert info.value.field == "payload"
    assert row_count(db) == 1
    lease = queue.claim(QUEUE)
    assert lease.job_id == accepted.job_id and lease.payload == encode(Blob(text))


def test_one_mebibyte_payload_round_trips(db):
    queue = make_queue(db, max_payload_bytes=MIB)
    overhead = len(encode(Blob("")))
    text = ("caravel-€" * (MIB // 11))[: (MIB - overhead) // 3]
    text += "z" * (MIB - overhead - len(text.encode("utf-8")))
    payload = encode(Blob(text))
    assert len(payload.encode("utf-8")) == MIB
    queue.enqueue(Blob(text), dispatch())
    lease = queue.claim(QUEUE)
    assert lease is not None and lease.payload == payload


def test_nesting_depth_32_is_accepted_and_33_is_not(db):
    queue = make_queue(db)
    ok = queue.enqueue(Nested(nested_list(31)), dispatch())  # object + 31 arrays = 32
    assert queue.claim(QUEUE).job_id == ok.job_id
    with pytest.raises(InvalidField) as info:
        queue.enqueue(Nested(nested_list(32)), dispatch())
    assert info.value.field == "payload"
    assert row_count(db) == 1


def test_priority_and_max_attempts_are_stored(db):
    queue = make_queue(db, max_attempts=7)
    result = queue.enqueue(Ping(1), dispatch(priority=Priority.HIGH))
    status = queue.status(result.job_id, QUEUE, TENANT)
    assert status.priority == Priority.HIGH and status.max_attempts == 7
    assert status.attempts == 0 and status.replay_count == 0
    assert status.last_failure is None and status.job_id == result.job_id
    assert isinstance(result.job_id, uuid.UUID)
    assert status.available_at.tzinfo is not None
    assert status.available_at.utcoffset() == timedelta(0)
    # max_attempts is frozen on the row: a queue with other options sees the old budget.
    assert make_queue(db, max_attempts=2).status(result.job_id, QUEUE, TENANT).max_attempts == 7


def test_non_ascii_identities_round_trip_exactly(db):
    queue = make_queue(db)
    tenant, key = "tënant-😀-東京", "clé-🔑"
    result = queue.enqueue(Ping(1), dispatch(key, tenant=tenant, queue="q.utf8"))
    status = queue.status(result.job_id, "q.utf8", tenant)
    assert status is not None and status.tenant_id == tenant
    assert row(db, result.job_id)["idempotency_key"] == key
    assert queue.enqueue(Ping(1), dispatch(key, tenant=tenant, queue="q.utf8")) == \
        type(result)(result.job_id, True)
    assert queue.status(result.job_id, "q.utf8", "tenant-😀-東京") is None
    assert queue.claim("q.utf8").context.tenant_id == tenant


def test_control_characters_inside_a_payload_round_trip(db):
    """JSON escapes them, so even PostgreSQL (no NUL in text) stores them."""
    queue = make_queue(db)
    text = "nul\x00 tab\t bell\x07 line\u2028 quote\" backslash\\"
    queue.enqueue(Blob(text), dispatch())
    lease = queue.claim(QUEUE)
    assert lease.payload == encode(Blob(text))
