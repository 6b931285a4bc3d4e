"""``QueueScheduler.run``: it sleeps until the next slot (no busy poll), stops promptly,
and several scheduler processes converge on one job per slot."""
from __future__ import annotations

import logging
import multiprocessing
import threading
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from typing import Any, List

import peewee
import pytest

from caravel_lite import QueueScheduler
from caravel_lite.clock import system_clock
from caravel_lite.testing import ManualClock
from tests.scheduler import procs
from tests.scheduler.jobs import QUEUE, TENANT, Tick, job_count, keys, make_queue
from tests.support import kill_other_connections, wait_for

UTC = timezone.utc


class CountingClock:
    """A clock that counts how often it is read (a busy loop would read it constantly)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads = 0

    def __call__(self) -> datetime:
        self.reads += 1
        return self.inner()


class Running:
    """``scheduler.run`` in a thread; keeps any exception."""

    def __init__(self, scheduler: QueueScheduler) -> None:
        self.scheduler = scheduler
        self.stop = threading.Event()
        self.errors: List[BaseException] = []
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.scheduler.run(stop=self.stop)
        except BaseException as exc:  # reported by finish()
            self.errors.append(exc)
        finally:
            self.scheduler.queue.db.close()

    def finish(self) -> float:
        """Set stop; return how long run() took to return."""
        started = time.monotonic()
        self.stop.set()
        self.thread.join(timeout=10)
        elapsed = time.monotonic() - started
        assert not self.thread.is_alive(), "run() did not stop"
        assert not self.errors, self.errors
        return elapsed


def test_run_stops_within_half_a_second_while_waiting_for_a_slot_a_day_away(db, connect):
    # At the start of a daily slot: that slot is enqueued, the next is a day away.
    clock = CountingClock(ManualClock(datetime(2024, 5, 1, tzinfo=UTC)))
    scheduler = QueueScheduler(make_queue(connect(), clock=clock))
    scheduler.every("daily", timedelta(days=1), Tick(1), queue=QUEUE, tenant_id=TENANT)
    running = Running(scheduler)
    try:
        wait_for(lambda: job_count(db) == 1, message="the current slot's job")
        assert scheduler.next_due() == datetime(2024, 5, 2, tzinfo=UTC)
        reads = clock.reads
        running.stop.wait(1.0)  # a second of real time while it waits
        # at most the read that follows the enqueue, then none while it sleeps
        assert clock.reads - reads <= 2, "run() polled instead of sleeping"
    finally:
        elapsed = running.finish()
    assert elapsed < 0.5
    assert job_count(db) == 1


def test_run_wakes_for_each_slot_without_polling(db, connect):
    clock = CountingClock(system_clock)
    scheduler = QueueScheduler(make_queue(connect(), clock=clock))  # polls at most once a minute
    # catch_up: on this shared machine a pass can stall for longer than a slot, and a
    # stalled scheduler skips slots by design (no back-fill without it)
    scheduler.every("beat", timedelta(seconds=1), Tick(1), queue=QUEUE, tenant_id=TENANT,
                    catch_up=timedelta(seconds=5))
    running = Running(scheduler)
    try:
        wait_for(lambda: job_count(db) >= 4, timeout=30, message="four slots' jobs")
    finally:
        running.finish()
    slots = sorted(int(k.rsplit(":", 1)[1]) for k in keys(db))
    assert slots == list(range(slots[0], slots[0] + len(slots)))  # no slot skipped
    # a handful of clock reads per slot (a busy poll would make thousands)
    assert clock.reads < 20 * len(slots)


class RealRateClock:
    """Runs at real speed from ``start``; ``jump_to`` moves it on at once (the time a
    stalled pass takes, without waiting for it)."""

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.started = time.monotonic()
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return self.start + self.offset + timedelta(seconds=time.monotonic() - self.started)

    def jump_to(self, instant: datetime) -> None:
        self.offset += instant - self()


class _StallAfterFirstEnqueue(logging.Handler):
    """The first pass's enqueue takes (on ``clock``) until ``until``."""

    def __init__(self, clock: RealRateClock, until: datetime) -> None:
        super().__init__(logging.INFO)
        self.clock, self.until, self.stalled = clock, until, False

    def emit(self, record: logging.LogRecord) -> None:
        if "enqueued slot" in record.getMessage() and not self.stalled:
            self.stalled = True
            self.clock.jump_to(self.until)


def test_run_enqueues_the_slot_that_began_during_a_stalled_pass(db, connect):
    """A pass that ran past the start of the next slot: that slot, current when the pass
    ends, is enqueued then, not skipped for the one after it (run() used to sleep until
    the slot after the current one, and a pass only enqueues the newest)."""
    t0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    clock = RealRateClock(t0 + timedelta(seconds=30))
    scheduler = QueueScheduler(make_queue(connect(), clock=clock))  # polls once a minute
    scheduler.every("minutely", timedelta(minutes=1), Tick(1), queue=QUEUE, tenant_id=TENANT)
    stall = _StallAfterFirstEnqueue(clock, t0 + timedelta(seconds=118))
    log = logging.getLogger("caravel_lite")
    level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(stall)
    running = Running(scheduler)
    try:
        wait_for(lambda: job_count(db) >= 3 or clock() > t0 + timedelta(seconds=122),
                 timeout=30, message="the slot after the stalled pass")
    finally:
        running.finish()
        log.removeHandler(stall)
        log.setLevel(level)
    first = int(t0.timestamp()) // 60
    assert stall.stalled
    assert [int(k.rsplit(":", 1)[1]) - first for k in keys(db)] == [0, 1, 2]


@pytest.mark.slow
def test_two_scheduler_processes_over_ten_slots_make_exactly_ten_jobs(db, db_url):
    ctx = multiprocessing.get_context("spawn")
    barrier, stop, results = ctx.Barrier(3), ctx.Event(), ctx.Queue()
    children = [ctx.Process(target=procs.run_scheduler, args=(db_url, barrier, stop, results))
                for _ in range(2)]
    for child in children:
        child.start()
    try:
        barrier.wait(timeout=procs.TIMEOUT)
        # The range starts two slots ahead, after both children run.
        first = int(time.time()) + 2
        wanted = [f"schedule:beat:1000:{n}" for n in range(first, first + 10)]
        after = f"schedule:beat:1000:{first + 10}"
        wait_for(lambda: after in keys(db), timeout=procs.TIMEOUT, interval=0.1,
                 message="the slot after the ten")
        stop.set()
        outcomes = [results.get(timeout=procs.TIMEOUT) for _ in children]
    finally:
        stop.set()
        for child in children:
            child.join(timeout=procs.TIMEOUT)
            if child.is_alive():
                child.kill()
    assert [child.exitcode for child in children] == [0, 0]
    stored = keys(db)
    assert [k for k in stored if k in wanted] == sorted(wanted)  # one job for each of the ten
    assert len(stored) == len(set(stored))
    created = defaultdict(int)
    attempts = defaultdict(int)
    for outcome in outcomes:
        for key, already in outcome:
            attempts[key] += 1
            created[key] += 0 if already else 1
    assert [created[k] for k in wanted] == [1] * 10  # exactly one process made each job
    assert sum(attempts[k] for k in wanted) > 10  # and they did compete for the slots
    for outcome in outcomes:
        assert len({k for k, _ in outcome if k in wanted}) >= 5


class FlakyQueue:
    """Wraps a queue's enqueue so that it fails like a lost connection while ``down``."""

    def __init__(self, queue: Any) -> None:
        self.down = True
        self.failures = 0
        self._enqueue = queue.enqueue
        queue.enqueue = self.enqueue

    def enqueue(self, job: Any, dispatch: Any) -> Any:
        if self.down:
            self.failures += 1
            raise peewee.OperationalError("server closed the connection unexpectedly")
        return self._enqueue(job, dispatch)


def test_run_rides_out_an_outage_with_max_outage(db, connect, caplog):
    caplog.set_level(logging.WARNING, logger="caravel_lite")
    scheduler = QueueScheduler(make_queue(connect(), clock=ManualClock(datetime(2024, 5, 1, tzinfo=UTC))))
    scheduler.every("daily", timedelta(days=1), Tick(1), queue=QUEUE, tenant_id=TENANT)
    flaky = FlakyQueue(scheduler.queue)
    stop = threading.Event()
    errors: List[BaseException] = []

    def main() -> None:
        try:
            scheduler.run(stop=stop, max_outage=60)
        except BaseException as exc:  # reported below
            errors.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        wait_for(lambda: flaky.failures >= 2, timeout=30, message="two failed passes")
        assert job_count(db) == 0 and thread.is_alive()
        flaky.down = False
        wait_for(lambda: job_count(db) == 1, timeout=30, message="the slot after the outage")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors and not thread.is_alive()
    warnings = [r.getMessage() for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(warnings) == 1 and "OperationalError" in warnings[0]
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_run_raises_without_max_outage_and_once_the_budget_is_spent(db, connect):
    for budget in (None, 0.6):
        scheduler = QueueScheduler(make_queue(connect(), clock=ManualClock(datetime(2024, 5, 1, tzinfo=UTC))))
        scheduler.every("daily", timedelta(days=1), Tick(1), queue=QUEUE, tenant_id=TENANT)
        flaky = FlakyQueue(scheduler.queue)
        with pytest.raises(peewee.OperationalError):
            scheduler.run(stop=threading.Event(), max_outage=budget)
        if budget is None:
            assert flaky.failures == 1  # propagated at once
        else:
            assert flaky.failures >= 2  # waited, tried again, then gave up
    assert job_count(db) == 0


@pytest.mark.backends("postgres", "mysql")
def test_a_running_scheduler_survives_a_killed_connection(db, connect, backend):
    # open_database's databases reconnect on the next statement outside a transaction;
    # max_outage covers a server that takes a while to come back.
    scheduler = QueueScheduler(make_queue(connect()))
    scheduler.every("beat", timedelta(seconds=1), Tick(1), queue=QUEUE, tenant_id=TENANT,
                    catch_up=timedelta(seconds=5))
    stop = threading.Event()
    errors: List[BaseException] = []

    def main() -> None:
        try:
            scheduler.run(stop=stop, max_outage=30)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            scheduler.queue.db.close()

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        wait_for(lambda: job_count(db) >= 2, timeout=30, message="two slots")
        assert kill_other_connections(db, backend) >= 1
        before = job_count(db)
        wait_for(lambda: job_count(db) >= before + 2, timeout=30,
                 message="two more slots after the killed connection")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not errors and not thread.is_alive()
    slots = sorted(int(k.rsplit(":", 1)[1]) for k in keys(db))
    assert slots == list(range(slots[0], slots[0] + len(slots)))
