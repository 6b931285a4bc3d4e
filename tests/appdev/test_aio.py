"""The asyncio API on every database: the sync guarantees through a bounded set of
threads, and an event loop that keeps ticking while 100 requests enqueue."""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Awaitable, Callable, List, Tuple

import peewee
import pytest

from caravel_lite import Dispatch, JobState, QueueOutbox
from caravel_lite.aio import Offload
from caravel_lite.errors import InvalidField, OutsideTransaction
from caravel_lite.testing import ManualClock, drain, enqueued

from tests.appdev.jobs import QUEUE, TENANT, Flaky, Recorder, SendEmail, make_queue

TICK = 0.010
MAX_GAP = 0.050
REQUESTS = 100


def aio_threads() -> List[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("caravel-aio-")]


def test_the_async_calls_keep_the_sync_guarantees(db):
    recorder = Recorder()
    queue = make_queue(db, recorder, ManualClock(), max_attempts=1)
    where = Dispatch(QUEUE, tenant_id=TENANT, idempotency_key="signup-7")

    async def scenario() -> None:
        try:
            first = await queue.aenqueue(SendEmail("a@example.com"), where)
            again = await queue.aenqueue(SendEmail("a@example.com"), where)
            assert (again.job_id, again.already_enqueued) == (first.job_id, True)
            batch = await queue.aenqueue_many([
                (SendEmail("b@example.com"), Dispatch(QUEUE, tenant_id=TENANT)),
                (Flaky("broken", 9), Dispatch(QUEUE, tenant_id=TENANT))])
            assert [r.already_enqueued for r in batch] == [False, False]
            status = await queue.astatus(first.job_id, QUEUE, TENANT)
            assert status is not None and status.state is JobState.PENDING
            assert await queue.astatus(first.job_id, QUEUE, "someone-else") is None
            with pytest.raises(InvalidField, match="queue"):
                await queue.aenqueue(SendEmail("c@example.com"), Dispatch("", TENANT))
            await asyncio.get_running_loop().run_in_executor(None, drain, queue, QUEUE)
            broken = batch[1].job_id
            assert (await queue.astatus(broken, QUEUE, TENANT)).state is JobState.DEAD_LETTER
            assert await queue.areplay(broken, QUEUE, TENANT) is True
            assert await queue.areplay(broken, QUEUE, TENANT) is False
            assert len(aio_threads()) <= queue.async_threads
        finally:
            await queue.aclose()

    asyncio.run(scenario())
    assert aio_threads() == []
    assert [job.job for job in enqueued(queue, QUEUE)] == [Flaky("broken", 9)]


async def _ticker(done: asyncio.Event, gaps: List[float]) -> None:
    last = time.perf_counter()
    while not done.is_set():
        await asyncio.sleep(TICK)
        now = time.perf_counter()
        gaps.append(now - last)
        last = now


def _measure(requests: Callable[[], Awaitable[object]]) -> Tuple[List[float], float]:
    """The ticker's gaps while ``requests()`` runs, and how long it ran."""
    gaps: List[float] = []

    async def scenario() -> float:
        done = asyncio.Event()
        tick = asyncio.create_task(_ticker(done, gaps))
        await asyncio.sleep(3 * TICK)  # the ticker is running before the requests start
        started = time.perf_counter()
        try:
            await requests()
        finally:
            elapsed = time.perf_counter() - started
            done.set()
            await tick
        return elapsed

    return gaps, asyncio.run(scenario())


# The machine is shared: even an idle event loop now and then misses a tick by 50 ms
# when other processes hold both cores. A stall of our making shows in every run (the
# blocking control below), noise does not: up to three runs, and one must be clean.
RUNS = 3


def test_100_concurrent_enqueues_never_stall_the_event_loop(db):
    queue = make_queue(db, Recorder(), ManualClock())
    worst: List[float] = []

    async def requests() -> None:
        try:
            await asyncio.gather(*(
                queue.aenqueue(SendEmail(f"user{i}@example.com"),
                               Dispatch(QUEUE, tenant_id=TENANT, idempotency_key=f"r{i}"))
                for i in range(REQUESTS)))
        finally:
            await queue.aclose()

    for _ in range(RUNS):
        gaps, elapsed = _measure(requests)
        # The ticker ran all along: enough ticks to cover the requests' wall time.
        assert len(gaps) >= int(elapsed / MAX_GAP)
        worst.append(max(gaps))
        if worst[-1] <= MAX_GAP:
            break
    assert len(enqueued(queue, QUEUE)) == REQUESTS  # repeated runs hit the same keys
    assert min(worst) <= MAX_GAP, (
        f"the event loop stalled in every run: {[round(w * 1000, 1) for w in worst]} ms")


@pytest.mark.backends("sqlite")
def test_the_ticker_does_see_enqueues_that_block_the_loop(db):
    """The control: the same requests made with the blocking call are caught."""
    queue = make_queue(db, Recorder(), ManualClock())

    async def requests() -> None:
        # Blocking enqueues for three ticks' worth of time at least: a fixed count can
        # finish within one tick on a fast machine, and then there is nothing to catch.
        started = time.perf_counter()
        i = 0
        while i < REQUESTS or time.perf_counter() - started < 3 * MAX_GAP:
            queue.enqueue(SendEmail(f"user{i}@example.com"), Dispatch(QUEUE, TENANT))
            i += 1

    gaps, _ = _measure(requests)
    assert max(gaps) > MAX_GAP


def test_a_call_cancelled_before_it_started_never_runs(db):
    queue = make_queue(db, Recorder(), ManualClock())
    queue.async_threads = 1
    gate = threading.Event()

    async def scenario() -> None:
        try:
            blocker = asyncio.ensure_future(queue._offload().call(gate.wait, 5))
            waiting = asyncio.ensure_future(
                queue.aenqueue(SendEmail("never@example.com"), Dispatch(QUEUE, TENANT)))
            await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting  # the cancellation reached the queued call
            gate.set()
            assert await blocker is True
        finally:
            await queue.aclose()

    asyncio.run(scenario())
    assert enqueued(queue, QUEUE, state=None) == []


def test_offload_is_bounded_and_closes_each_threads_connection(db):
    offload = Offload(db, 2, "caravel-aio-test")
    seen = set()
    gate = threading.Barrier(2, timeout=10)

    def work() -> int:
        seen.add(threading.current_thread().name)
        db.execute_sql("SELECT 1")  # opens this thread's connection
        gate.wait()  # two run at once
        return 1

    futures = [offload.submit(work) for _ in range(6)]
    assert sum(f.result(timeout=30) for f in futures) == 6
    assert len(seen) == 2  # both threads, and no third
    offload.close()
    assert [t for t in threading.enumerate() if t.name.startswith("caravel-aio-test")] == []
    with pytest.raises(RuntimeError, match="closed"):
        offload.submit(work)
    with pytest.raises(InvalidField, match="async_threads"):
        Offload(db, 0, "x")


def test_astage_and_atransaction_commit_business_rows_and_intents_together(db):
    class Signup(peewee.Model):
        email = peewee.CharField()

        class Meta:
            database = db
            table_name = "appdev_test_signup"

    db.create_tables([Signup])
    recorder = Recorder()
    outbox = QueueOutbox(db, recorder.registry, clock=ManualClock())

    def intents() -> int:
        return db.execute_sql("SELECT COUNT(*) FROM caravel_outbox").fetchone()[0]

    async def scenario() -> None:
        try:
            staged = await outbox.astage(SendEmail("solo@example.com"), Dispatch(QUEUE, TENANT))
            assert staged.already_staged is False

            def sign_up() -> int:
                row = Signup.create(email="pair@example.com")
                outbox.stage(SendEmail(row.email), Dispatch(QUEUE, TENANT))
                return row.id
            assert isinstance(await outbox.atransaction(sign_up), int)

            def failing() -> None:
                Signup.create(email="lost@example.com")
                outbox.stage(SendEmail("lost@example.com"), Dispatch(QUEUE, TENANT))
                raise RuntimeError("payment declined")
            with pytest.raises(RuntimeError, match="declined"):
                await outbox.atransaction(failing)
            with pytest.raises(InvalidField, match="work"):
                await outbox.atransaction(None)  # type: ignore[arg-type]
        finally:
            await outbox.aclose()

    try:
        asyncio.run(scenario())
        assert intents() == 2
        assert [s.email for s in Signup.select()] == ["pair@example.com"]
        with pytest.raises(OutsideTransaction):
            outbox.stage(SendEmail("x"), Dispatch(QUEUE, TENANT))  # the sync rule stands
    finally:
        db.drop_tables([Signup])


def test_an_in_memory_database_from_open_database_serves_the_async_threads():
    from caravel_lite import migrate, open_database

    db = open_database("sqlite:///:memory:")
    db.connect()
    try:
        migrate(db)
        queue = make_queue(db, Recorder(), ManualClock())

        async def scenario() -> None:
            try:
                await asyncio.gather(*(queue.aenqueue(SendEmail(f"m{i}"), Dispatch(QUEUE, TENANT))
                                       for i in range(10)))
            finally:
                await queue.aclose()
        asyncio.run(scenario())
        assert len(enqueued(queue, QUEUE)) == 10
    finally:
        db.close()
