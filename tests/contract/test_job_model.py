"""The job model (issue 24), every database: options per job type and per call, in
that order over QueueOptions, decided at enqueue and stored with the job; kept results
read through queue.result / queue.wait (and their asyncio forms) under the status
rules, private to operators unless payloads are shown, pruned with their jobs."""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any, Dict, List

import pytest

from caravel_lite import (DatabaseQueue, Dispatch, Failure, InvalidField, JobContext,
                          JobRegistry, JobResult, JobState, Priority, QueueAdmin,
                          QueueOptions, QueueWorker)
from caravel_lite.testing import ManualClock
from caravel_lite.validation import check_dispatch

from tests.support import wait_for

TENANT = "tenant-a"


@dataclass(frozen=True)
class Typed:
    n: int


@dataclass(frozen=True)
class Plain:
    n: int


@dataclass(frozen=True)
class Summary:
    total: Decimal
    ids: List[uuid.UUID]


def _noop(job: Any, ctx: JobContext) -> None:
    return None


def _fail(job: Any, ctx: JobContext) -> None:
    raise RuntimeError("always")


def _status(queue: DatabaseQueue, job_id: uuid.UUID, queue_name: str) -> Any:
    found = queue.status(job_id, queue=queue_name, tenant_id=TENANT)
    assert found is not None
    return found


def test_a_dispatch_overrides_the_type_which_overrides_the_queue(db):
    registry = JobRegistry()
    registry.register("jm.typed.v1", Typed, _fail, queue="typed", priority=Priority.HIGH,
                      max_attempts=5, retry_delay=timedelta(seconds=2),
                      max_retry_delay=timedelta(seconds=3))
    registry.register("jm.plain.v1", Plain, _fail)
    clock = ManualClock()
    queue = DatabaseQueue(db, registry, QueueOptions(max_attempts=2), clock=clock)
    worker = QueueWorker(queue)

    by_type = queue.enqueue(Typed(1), Dispatch(tenant_id=TENANT)).job_id
    by_call = queue.enqueue(Typed(2), Dispatch(queue="other", tenant_id=TENANT,
                                               priority=Priority.LOW, max_attempts=1)).job_id
    by_queue = queue.enqueue(Plain(1), Dispatch(queue="plain", tenant_id=TENANT)).job_id
    typed, called, plain = (_status(queue, by_type, "typed"), _status(queue, by_call, "other"),
                            _status(queue, by_queue, "plain"))
    assert (typed.priority, typed.max_attempts) == (Priority.HIGH, 5)
    assert (called.priority, called.max_attempts) == (Priority.LOW, 1)
    assert (plain.priority, plain.max_attempts) == (Priority.NORMAL, 2)
    with pytest.raises(InvalidField) as info:
        queue.enqueue(Plain(2), Dispatch(tenant_id=TENANT))
    assert info.value.field == "queue"

    # The type's backoff: 2 s, then 4 s capped at its 3 s (the queue's would be 5 s).
    start = clock()
    assert worker.run_once("typed")
    assert _status(queue, by_type, "typed").available_at == start + timedelta(seconds=2)
    clock.advance(timedelta(seconds=2))
    assert worker.run_once("typed")
    assert _status(queue, by_type, "typed").available_at == clock() + timedelta(seconds=3)
    # A call's backoff over the type's.
    quick = queue.enqueue(Typed(3), Dispatch(tenant_id=TENANT,
                                             retry_delay=timedelta(milliseconds=10))).job_id
    clock.advance(timedelta(seconds=1))
    queue.enqueue(Typed(4), Dispatch(queue="spare", tenant_id=TENANT))
    lease = queue.claim("typed")
    assert lease is not None and lease.job_id == quick
    assert queue.fail(lease, Failure.HANDLER_FAILED)
    assert _status(queue, quick, "typed").available_at == clock() + timedelta(milliseconds=10)


def test_type_options_are_checked_at_registration_naming_the_field():
    registry = JobRegistry()
    bad: Dict[str, Any] = {
        "queue": "Not A Queue", "priority": 2, "max_attempts": 0,
        "retry_delay": timedelta(0), "max_retry_delay": timedelta(days=2),
        "timeout": timedelta(days=8), "keep_result": "yes"}
    for field, value in bad.items():
        with pytest.raises(InvalidField) as info:
            registry.register("jm.bad.v1", Typed, _noop, **{field: value})
        assert info.value.field == field
        assert "jm.bad.v1" not in registry
    with pytest.raises(InvalidField) as info:
        registry.register("jm.bad.v1", Typed, _noop, retry_delay=timedelta(seconds=9),
                          max_retry_delay=timedelta(seconds=1))
    assert info.value.field == "max_retry_delay"
    for field, value in (("max_attempts", 101), ("timeout", timedelta(0)),
                         ("keep_result", 1)):
        with pytest.raises(InvalidField) as info:
            check_dispatch(Dispatch(queue="q", tenant_id=TENANT, **{field: value}))
        assert info.value.field == field


def test_options_decided_at_enqueue_survive_a_deploy_that_changes_the_type(db):
    clock = ManualClock()
    before = JobRegistry()
    before.register("jm.typed.v1", Typed, _fail, queue="typed", max_attempts=4,
                    retry_delay=timedelta(seconds=2))
    old = DatabaseQueue(db, before, clock=clock)
    job_id = old.enqueue(Typed(1), Dispatch(tenant_id=TENANT)).job_id

    after = JobRegistry()  # the next deploy: other attempts and backoff for the type
    after.register("jm.typed.v1", Typed, _fail, queue="typed", max_attempts=1,
                   retry_delay=timedelta(seconds=60))
    new = DatabaseQueue(db, after, clock=clock)
    assert QueueWorker(new).run_once("typed")
    found = _status(new, job_id, "typed")
    assert (found.state, found.max_attempts) == (JobState.PENDING, 4)
    assert found.available_at == clock() + timedelta(seconds=2)


# -- results ---------------------------------------------------------------------------

def _results_registry(values: Dict[int, Any]) -> JobRegistry:
    registry = JobRegistry()

    @registry.job("jm.kept.v1", Typed, queue="kept", keep_result=True, max_attempts=1)
    def kept(job: Typed, ctx: JobContext) -> Any:
        return values[job.n]

    @registry.job("jm.summary.v1", Plain, queue="kept", keep_result=True, max_attempts=1)
    def summary(job: Plain, ctx: JobContext) -> Summary:
        return Summary(Decimal("1.50"), [uuid.UUID(int=job.n)])

    return registry


def test_a_kept_result_is_read_by_its_tenant_only_and_pruned_with_its_job(db):
    values: Dict[int, Any] = {1: {"rows": [1, 2.5, None, True, "x"]}, 2: None}
    queue = DatabaseQueue(db, _results_registry(values))
    worker = QueueWorker(queue)
    first = queue.enqueue(Typed(1), Dispatch(tenant_id=TENANT)).job_id
    second = queue.enqueue(Typed(2), Dispatch(tenant_id=TENANT)).job_id
    dataclass_job = queue.enqueue(Plain(7), Dispatch(tenant_id=TENANT)).job_id
    unkept = queue.enqueue(Typed(1), Dispatch(tenant_id=TENANT, keep_result=False)).job_id
    pending = queue.result(first, "kept", TENANT)
    assert pending == JobResult(first, JobState.PENDING, None, None, None, 0, None)
    for _ in range(4):
        assert worker.run_once("kept")

    done = queue.result(first, "kept", TENANT)
    assert done is not None and done.state is JobState.COMPLETED and done.finished
    assert done.value == {"rows": [1, 2.5, None, True, "x"]}
    assert done.finished_at is not None and done.started_at is not None
    assert done.attempts == 1 and done.last_failure is None
    assert queue.result(second, "kept", TENANT).value is None
    assert queue.result(dataclass_job, "kept", TENANT).value == Summary(
        Decimal("1.50"), [uuid.UUID(int=7)])
    assert queue.result(unkept, "kept", TENANT).value is None
    # The status rules: another tenant (exact match), another queue, an unknown id.
    assert queue.result(first, "kept", TENANT.upper()) is None
    assert queue.result(first, "kept", TENANT + " ") is None
    assert queue.result(first, "other", TENANT) is None
    assert queue.result(uuid.uuid4(), "kept", TENANT) is None
    with pytest.raises(InvalidField):
        queue.result("not-an-id", "kept", TENANT)

    # Operators see results only where they may see payloads.
    admin = QueueAdmin(db)
    assert admin.job(first).result is None
    assert admin.job(first, include_payload=True).result == (
        '{"rows":[1,2.5,null,true,"x"]}')
    assert queue.prune(older_than=timedelta(0)) == 4
    assert queue.result(first, "kept", TENANT) is None


def test_a_value_that_cannot_be_kept_fails_the_attempt_as_invalid_result(db):
    values: Dict[int, Any] = {1: {1, 2}, 2: (1, 2), 3: "x" * 200, 4: float("nan"),
                              5: {1: "int key"},
                              6: {"name": "\udcff"}}  # a lone surrogate: not UTF-8
    queue = DatabaseQueue(db, _results_registry(values), QueueOptions(max_result_bytes=100))
    ids = [queue.enqueue(Typed(n), Dispatch(tenant_id=TENANT)).job_id for n in values]
    worker = QueueWorker(queue)
    for _ in ids:
        assert worker.run_once("kept")
    for job_id in ids:
        found = queue.result(job_id, "kept", TENANT)
        assert (found.state, found.last_failure, found.value) == (
            JobState.DEAD_LETTER, Failure.INVALID_RESULT, None)
        assert found.finished
    assert QueueAdmin(db).job(ids[0]).failures[-1].category is Failure.INVALID_RESULT


def test_wait_returns_once_the_job_is_finished_and_times_out_before(db, connect):
    release = threading.Event()
    registry = JobRegistry()

    @registry.job("jm.slow.v1", Typed, queue="kept", keep_result=True)
    def slow(job: Typed, ctx: JobContext) -> int:
        release.wait(10)
        return job.n * 2

    queue = DatabaseQueue(db, registry)
    job_id = queue.enqueue(Typed(21), Dispatch(tenant_id=TENANT)).job_id
    with pytest.raises(TimeoutError):
        queue.wait(job_id, "kept", TENANT, timeout=0.05)
    assert queue.wait(uuid.uuid4(), "kept", TENANT, timeout=5) is None
    assert queue.wait(job_id, "kept", "tenant-b", timeout=5) is None

    worker_db = connect()
    worker = QueueWorker(DatabaseQueue(worker_db, registry))
    thread = threading.Thread(target=lambda: (worker.run_once("kept"), worker_db.close()))
    thread.start()
    try:
        release.set()
        done = queue.wait(job_id, "kept", TENANT, timeout=timedelta(seconds=20))
    finally:
        release.set()
        thread.join(20)
    assert done is not None and (done.state, done.value) == (JobState.COMPLETED, 42)

    async def read() -> Any:
        try:
            return (await queue.aresult(job_id, "kept", TENANT),
                    await queue.await_result(job_id, "kept", TENANT, timeout=5))
        finally:
            await queue.aclose()
    assert asyncio.run(read()) == (done, done)
    with pytest.raises(InvalidField) as info:
        queue.wait(job_id, "kept", TENANT, timeout=-1)
    assert info.value.field == "timeout"


def test_options_staged_in_the_outbox_reach_the_job_through_the_relay(db):
    from caravel_lite import OutboxRelay, QueueOutbox

    values: Dict[int, Any] = {5: [5]}
    registry = _results_registry(values)
    clock = ManualClock()
    queue = DatabaseQueue(db, registry, clock=clock)
    outbox = QueueOutbox(db, registry, clock=clock)
    with db.atomic():
        outbox.stage(Typed(5), Dispatch(tenant_id=TENANT, max_attempts=2,
                                        retry_delay=timedelta(seconds=1)))
    assert OutboxRelay(db, queue).run_once() == 1
    lease = queue.claim("kept")
    assert lease is not None and lease._max_attempts == 2
    assert queue.fail(lease, Failure.HANDLER_FAILED)  # the staged backoff: 1 s
    assert _status(queue, lease.job_id, "kept").available_at == clock() + timedelta(seconds=1)
    clock.advance(timedelta(seconds=1))
    assert QueueWorker(queue).run_once("kept")
    assert queue.result(lease.job_id, "kept", TENANT).value == [5]  # the type's keep_result


@pytest.mark.backends("sqlite", "postgres")
def test_wait_wakes_on_the_database_signal_not_on_polling(db, connect, monkeypatch):
    """SQLite's data_version and PostgreSQL's NOTIFY (0008's trigger) end the wait:
    with polling pushed out to 30 s, the wait still returns at once."""
    from caravel_lite import results

    monkeypatch.setattr(results, "POLL_FIRST", 30.0)
    monkeypatch.setattr(results, "POLL_MAX", 30.0)
    release = threading.Event()
    registry = JobRegistry()

    @registry.job("jm.held.v1", Typed, queue="kept", keep_result=True)
    def held(job: Typed, ctx: JobContext) -> str:
        assert release.wait(10)
        return "done"

    queue = DatabaseQueue(db, registry)
    job_id = queue.enqueue(Typed(1), Dispatch(tenant_id=TENANT)).job_id
    worker_db = connect()

    def work() -> None:
        QueueWorker(DatabaseQueue(worker_db, registry)).run_once("kept")
        worker_db.close()
    thread = threading.Thread(target=work)
    thread.start()
    # The job finishes while the wait waits (its first read found it unfinished).
    timer = threading.Timer(0.3, release.set)
    timer.start()
    begin = time.monotonic()
    try:
        done = queue.wait(job_id, "kept", TENANT, timeout=20)
    finally:
        release.set()
        thread.join(20)
    assert done is not None and done.value == "done"
    assert time.monotonic() - begin < 10


def test_wait_returns_for_a_cancelled_job_which_is_finished(db):
    """CANCELLED is final (caravel_lite.cancel): result() says finished, and wait()
    returns at once rather than waiting out its timeout on a job that never ends."""
    queue = DatabaseQueue(db, _results_registry({1: 1}))
    job_id = queue.enqueue(Typed(1), Dispatch(tenant_id=TENANT)).job_id
    assert queue.cancel(job_id, "kept", TENANT)
    found = queue.result(job_id, "kept", TENANT)
    assert found is not None and found.state is JobState.CANCELLED
    assert found.finished and found.value is None
    begin = time.monotonic()
    assert queue.wait(job_id, "kept", TENANT, timeout=5) == found
    assert time.monotonic() - begin < 2
