"""caravel_lite.worker.waiter on every database: a waiter wakes soon after another
connection or process commits a due job of one of its queues, ends at once on a wake-up,
wakes when a delayed job or an expired lease becomes claimable, ignores what is not its
queues', and falls back to polling when its change signal fails.

No tight wall-clock bound (issue #11, item 10): each wait is given a LONG timeout, and a
wait that ends far sooner (GENEROUS) proves it was ended by what the test did, not by
the timeout; lower bounds prove it did not end early."""
from __future__ import annotations

import logging
import multiprocessing
import sys
import threading
import time
from datetime import timedelta

import pytest

from caravel_lite import Dispatch, migrate, open_database
from caravel_lite.dialect import dialect_of
from caravel_lite.worker import waiter as waiter_module
from caravel_lite.worker.waiter import (ACTIVE_FOR, DUE_READ_KEPT, IDLE_POLL_PROBE, POLL_PROBE,
                                        STARTING_FOR, DataVersionWaiter, NotifyWaiter, PollWaiter, Waiter,
                                        Wakeup, waiter_for)
from tests.support import wait_for
from tests.wakeup import procs
from tests.wakeup.helpers import (OTHER_QUEUE, QUEUE, TENANT, Ping, Recording, enqueue,
                                  make_queue, timed_wait)

# Far longer than any wake-up: a wait that ends well before it was woken by a signal.
LONG = 30.0
# A bound far below LONG and far above any wake-up on a loaded machine.
GENEROUS = 5.0


@pytest.fixture
def queue(db):
    return make_queue(db)


@pytest.fixture
def other(connect):
    """A queue over a second connection, as another application process would use."""
    db = connect()
    db.connect()
    return make_queue(db)


@pytest.fixture
def waiter(queue):
    created = waiter_for(queue, QUEUE)
    yield created
    created.close()


@pytest.fixture
def wakeup():
    created = Wakeup()
    yield created
    created.close()


def test_the_dialect_chooses_the_strategy(queue, waiter):
    expected = {"notify": NotifyWaiter, "data_version": DataVersionWaiter,
                "poll": PollWaiter}[dialect_of(queue.db).change_signal]
    assert type(waiter) is expected
    assert waiter.signal == dialect_of(queue.db).change_signal
    if isinstance(waiter, NotifyWaiter):
        assert waiter.listening


def test_wakes_soon_after_another_process_enqueues(queue, waiter, db_url, wakeup):
    ctx = multiprocessing.get_context("spawn")
    go, results = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=procs.enqueue_when_told, args=(db_url, go, results))
    child.start()
    try:
        go.set()
        woken, _ = timed_wait(waiter, wakeup, LONG)
        woken_at = time.time()
        started = results.get(timeout=60)
        assert woken is True
        # Woken by the signal (or the poll probe), not by the 30 s timeout.
        assert started - 0.05 <= woken_at < started + GENEROUS, woken_at - started
        assert queue.claim(QUEUE) is not None
    finally:
        child.join(60)
    assert child.exitcode == 0


def test_wakes_soon_after_another_connection_enqueues(queue, other, waiter, wakeup):
    for n in range(3):  # and again after each wake-up
        timer = threading.Timer(0.1, enqueue, args=(other, n))
        timer.start()
        woken, elapsed = timed_wait(waiter, wakeup, LONG)
        timer.join()
        assert woken is True and elapsed < GENEROUS, elapsed
        lease = wait_for(lambda: queue.claim(QUEUE), timeout=5, message="the job")
        assert queue.complete(lease)


def test_one_waiter_serves_several_queues(queue, other, wakeup):
    with waiter_for(queue, [QUEUE, OTHER_QUEUE]) as waiter:
        for name in (OTHER_QUEUE, QUEUE):
            timer = threading.Timer(0.1, enqueue, args=(other, 1), kwargs={"queue_name": name})
            timer.start()
            woken, elapsed = timed_wait(waiter, wakeup, LONG)
            timer.join()
            assert woken is True and elapsed < GENEROUS, (name, elapsed)
            assert queue.claim(name) is not None


def test_times_out_when_nothing_changes(waiter, wakeup):
    woken, elapsed = timed_wait(waiter, wakeup, 0.3)
    assert woken is False
    assert 0.29 <= elapsed < GENEROUS


def test_a_wakeup_ends_the_wait_at_once(waiter, wakeup):
    outcome = []
    recording = Recording(waiter)
    thread = threading.Thread(target=lambda: outcome.append(timed_wait(recording, wakeup, LONG)))
    thread.start()
    assert recording.entered.wait(10)
    stopped_at = time.monotonic()
    wakeup.set()
    thread.join(LONG)
    assert not thread.is_alive()
    ended = time.monotonic() - stopped_at
    assert outcome and outcome[0][0] is False
    assert ended < GENEROUS, ended


def test_a_wakeup_raised_before_the_wait_returns_at_once(waiter, wakeup):
    wakeup.set()
    woken, elapsed = timed_wait(waiter, wakeup, LONG)
    assert woken is False and elapsed < GENEROUS
    wakeup.clear()
    woken, elapsed = timed_wait(waiter, wakeup, 0.2)  # cleared: a normal wait again
    assert woken is False and elapsed >= 0.19


@pytest.mark.parametrize("when", ["before-wait", "before-waiter"])
def test_wakes_when_a_delayed_job_falls_due(queue, other, when):
    """Whether the job was committed before the waiter existed or before the wait began
    (found by reading the table), the waiter wakes when it is due, not at the 30 s
    timeout."""
    _wakes_when_due(queue, other, when)


def test_wakes_when_a_delayed_job_committed_during_the_wait_falls_due(queue, other):
    """Learned from the change signal or the poll probe's read."""
    _wakes_when_due(queue, other, "during-wait")


def _wakes_when_due(queue, other, when: str) -> None:
    delay = 0.6
    waiter = None if when == "before-waiter" else waiter_for(queue, QUEUE)
    if when == "during-wait":
        timer = threading.Timer(0.1, enqueue, args=(other, 1), kwargs={"delay": delay})
        earliest = due = time.monotonic() + 0.1 + delay
        timer.start()
    else:
        # The job falls due ``delay`` after a moment during the enqueue call: no
        # earlier than from its start, no later than from its end (which a loaded
        # machine or a slow connection can hold up for a good part of a second).
        earliest = time.monotonic() + delay
        enqueue(other, 1, delay=delay)
        due = time.monotonic() + delay
        timer = None
    waiter = waiter or waiter_for(queue, QUEUE)
    wakeup = Wakeup()
    try:
        lease = None
        while lease is None and time.monotonic() < due + LONG:
            waiter.wait(wakeup, LONG)
            lease = queue.claim(QUEUE)
        claimed = time.monotonic()
    finally:
        waiter.close()
        wakeup.close()
        if timer is not None:
            timer.join()
    assert lease is not None
    assert earliest - 0.05 <= claimed < due + GENEROUS, (claimed - earliest, claimed - due)


def test_wakes_when_a_lease_expires(queue, other, wakeup):
    stale = make_queue(other.db, lease_duration=timedelta(seconds=1))
    enqueue(other, 1)
    first = stale.claim(QUEUE)  # a worker that then vanishes
    assert first is not None
    expires = time.monotonic() + 1.0
    with waiter_for(queue, QUEUE) as waiter:
        lease = None
        while lease is None and time.monotonic() < expires + LONG:
            waiter.wait(wakeup, LONG)
            lease = queue.claim(QUEUE)
        taken = time.monotonic()
    assert lease is not None and lease.job_id == first.job_id and lease.attempt == 2
    assert expires - 0.05 <= taken < expires + GENEROUS, taken - expires


def test_commits_that_bring_nothing_due_do_not_end_the_wait(other, waiter, wakeup):
    """A job of another queue, a job for later: the waiter reads, finds nothing due for
    its queue, and keeps waiting."""
    enqueue(other, 1, queue_name=OTHER_QUEUE)
    enqueue(other, 2, delay=3600)
    woken, elapsed = timed_wait(waiter, wakeup, 0.4)
    assert woken is False and elapsed >= 0.39


@pytest.mark.change_signal("notify")
def test_a_batch_on_two_queues_wakes_a_listener_of_each(queue, other):
    """One enqueue_many, one INSERT statement: its notifications (one per queue) wake
    the waiters of both queues, and not a waiter of a queue the batch left out."""
    names = (QUEUE, OTHER_QUEUE, "wakeup-idle")
    waiters = [Recording(waiter_for(queue, name)) for name in names]
    wakeup = Wakeup()
    outcomes: dict = {}

    def wait(name, waiter, timeout):
        outcomes[name] = timed_wait(waiter, wakeup, timeout)

    threads = [threading.Thread(target=wait, args=(name, waiter, LONG if i < 2 else 1.0))
               for i, (name, waiter) in enumerate(zip(names, waiters))]
    try:
        for thread in threads:
            thread.start()
        for waiter in waiters:
            assert waiter.entered.wait(10)
        other.enqueue_many([(Ping(n), Dispatch(queue=QUEUE if n % 2 else OTHER_QUEUE,
                                               tenant_id=TENANT)) for n in range(10)])
        for thread in threads:
            thread.join(LONG)
            assert not thread.is_alive()
    finally:
        wakeup.set()
        for thread in threads:
            thread.join(LONG)
        for waiter in waiters:
            waiter.close()
        wakeup.close()
    for name in (QUEUE, OTHER_QUEUE):
        woken, elapsed = outcomes[name]
        assert woken is True and elapsed < GENEROUS, (name, elapsed)
    woken, elapsed = outcomes["wakeup-idle"]
    assert woken is False and elapsed >= 0.99
    assert len(queue.claim_many(QUEUE, 10)) == 5
    assert len(queue.claim_many(OTHER_QUEUE, 10)) == 5


def test_a_closed_waiter_refuses_to_wait(queue, wakeup):
    waiter = waiter_for(queue, QUEUE)
    waiter.close()
    waiter.close()  # idempotent
    with pytest.raises(RuntimeError):
        waiter.wait(wakeup, 0.1)


def test_an_unknown_queue_name_is_refused(queue):
    with pytest.raises(ValueError):
        waiter_for(queue, "Not A Queue")
    with pytest.raises(ValueError):
        waiter_for(queue, [])


# -- failing change signals ---------------------------------------------------------------


@pytest.mark.change_signal("notify")
def test_a_killed_listener_falls_back_to_polling_then_reconnects(queue, other, waiter, db,
                                                                 wakeup):
    pid = waiter._conn.info.backend_pid
    db.execute_sql("SELECT pg_terminate_backend(%s)", (pid,))
    woken, elapsed = timed_wait(waiter, wakeup, 0.3)  # no exception: a plain poll
    assert woken is False and 0.29 <= elapsed < GENEROUS
    assert not waiter.listening
    waiter.reconnect_delay = 0.0
    waiter._retry_at = 0.0
    enqueue(other, 1)  # announced while deaf: found by the read after reconnecting
    woken, elapsed = timed_wait(waiter, wakeup, LONG)
    assert woken is True and elapsed < GENEROUS and waiter.listening
    assert waiter._conn.info.backend_pid != pid
    assert queue.claim(QUEUE) is not None
    timer = threading.Timer(0.1, enqueue, args=(other, 2))
    timer.start()
    woken, elapsed = timed_wait(waiter, wakeup, LONG)
    timer.join()
    assert woken is True and elapsed < GENEROUS  # notifications again


@pytest.mark.change_signal("notify")
def test_an_unreachable_listener_polls(queue, other, monkeypatch, wakeup):
    import psycopg

    def refuse(*args, **kwargs):
        raise psycopg.OperationalError("simulated: listener cannot connect")
    monkeypatch.setattr(psycopg, "connect", refuse)
    with waiter_for(queue, QUEUE) as waiter:
        assert isinstance(waiter, NotifyWaiter) and not waiter.listening
        woken, elapsed = timed_wait(waiter, wakeup, 0.3)
        assert woken is False and 0.29 <= elapsed < GENEROUS
        enqueue(other, 1)  # (this thread's connection is open: connect is refused)
        woken, elapsed = timed_wait(waiter, wakeup, LONG)  # the poll probe finds it
        assert woken is True and elapsed < GENEROUS


@pytest.mark.change_signal("data_version")
def test_a_failing_data_version_connection_falls_back_then_reopens(queue, other, waiter,
                                                                   wakeup):
    broken = waiter._conn
    broken.close()  # every further probe on it fails
    woken, elapsed = timed_wait(waiter, wakeup, 0.3)  # no exception: reads instead
    assert woken is False and 0.29 <= elapsed < GENEROUS
    assert waiter._conn is not broken  # dropped, and reopened on a later look
    enqueue(other, 1)
    assert waiter.wait(wakeup, LONG) is True
    assert waiter._conn is not None and waiter._conn is not broken
    assert queue.claim(QUEUE) is not None
    timer = threading.Timer(0.1, enqueue, args=(other, 2))
    timer.start()
    woken, elapsed = timed_wait(waiter, wakeup, LONG)
    timer.join()
    assert woken is True and elapsed < GENEROUS


@pytest.mark.backends("sqlite")
def test_an_in_memory_sqlite_database_polls(backend, wakeup):
    db = open_database("sqlite:///:memory:")
    with db.connection_context():
        migrate(db)
        with waiter_for(make_queue(db), QUEUE) as waiter:
            assert type(waiter) is PollWaiter
            woken, elapsed = timed_wait(waiter, wakeup, 0.2)
    assert woken is False and elapsed >= 0.19


def test_an_unreadable_table_waits_the_timeout_then_lets_the_claim_meet_it(queue, waiter,
                                                                           wakeup):
    """The reads are hints too: failing ones neither raise nor spin; at the timeout
    the waiter says "claim", so that the worker's claim meets the fault."""
    waiter.probe_sql = waiter.probe_sql.replace("caravel_jobs", "caravel_missing")
    woken, elapsed = timed_wait(waiter, wakeup, 0.3)
    assert woken is True and 0.29 <= elapsed < GENEROUS


def test_the_base_waiter_polls_with_reads(queue, other, wakeup):
    waiter = Waiter(queue, QUEUE)
    woken, elapsed = timed_wait(waiter, wakeup, 0.2)
    assert woken is False and elapsed >= 0.19
    reads = waiter.reads
    assert reads >= 2  # the next-due read and the probes
    enqueue(other, 1)
    woken, elapsed = timed_wait(waiter, wakeup, LONG)
    assert woken is True and elapsed < GENEROUS


# -- probe rates (a controlled clock: reads are counted, nothing is timed) ----------------


class _Clock:
    """Stands for the ``time`` module of the waiters (caravel_lite.worker.waiting): a monotonic clock
    that only the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class _Sleepless:
    """A wake-up that is never raised and whose waits pass at once on the clock."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock

    def is_set(self) -> bool:
        return False

    def wait(self, timeout):
        self.clock.now += timeout
        return False


def _use_clock(monkeypatch, clock) -> None:
    """The waiters' modules read this clock instead of the time module."""
    from caravel_lite.worker.waiting import base, data_version, notify, polling
    for module in (base, data_version, notify, polling):
        if hasattr(module, "time"):
            monkeypatch.setattr(module, "time", clock)


def test_the_poll_probes_at_the_idle_rate_until_work_is_found(queue, monkeypatch):
    """A new waiter reads at POLL_PROBE for its first STARTING_FOR seconds, then, having
    found no work, at IDLE_POLL_PROBE (a new worker's first claim already takes what is
    waiting); once a wait found a job, or the worker says a claim did (found_work), at
    POLL_PROBE for ACTIVE_FOR seconds, then idle again. Counted over one wait of a
    second: the next-due read, the probes, the read at the timeout."""
    clock = _Clock()
    _use_clock(monkeypatch, clock)
    wakeup = _Sleepless(clock)

    def reads_in_a_second(waiter: Waiter) -> int:
        clock.now += 2 * DUE_READ_KEPT  # a wait of its own (see the next test)
        before = waiter.reads
        assert waiter.wait(wakeup, 1.0) is False
        return waiter.reads - before

    idle_at_most = 2 + round(1 / IDLE_POLL_PROBE)
    fast_at_least = round(1 / POLL_PROBE)
    with PollWaiter(queue, QUEUE) as waiter:
        before = waiter.reads
        assert waiter.wait(wakeup, 0.8 * STARTING_FOR) is False
        assert waiter.reads - before >= round(0.8 * STARTING_FOR / POLL_PROBE)
        clock.now += STARTING_FOR
        assert reads_in_a_second(waiter) <= idle_at_most
        assert reads_in_a_second(waiter) <= idle_at_most  # waits that find nothing
        enqueue(queue, 1)
        assert waiter.wait(wakeup, LONG) is True
        assert queue.claim(QUEUE) is not None
        assert reads_in_a_second(waiter) >= fast_at_least
        clock.now += ACTIVE_FOR
        assert reads_in_a_second(waiter) <= idle_at_most
        waiter.found_work()  # what the worker calls after a claim that leased jobs
        assert reads_in_a_second(waiter) >= fast_at_least


def test_a_wait_that_follows_a_timeout_takes_the_next_due_time_from_its_read(queue,
                                                                            monkeypatch):
    """An idle worker's waits follow each other at once: the read at one's timeout
    (nothing due now, a job due later) stands for the next one's read of when that job
    falls due; a wait begun later reads it again. Under a controlled clock, counting
    the waiter's table reads (the next-due read and the timeout's read; the probes in
    between are PollWaiter's own statement)."""
    clock = _Clock()
    _use_clock(monkeypatch, clock)
    wakeup = _Sleepless(clock)
    enqueue(queue, 1, delay=60)  # due in a minute on the queue's clock
    with PollWaiter(queue, QUEUE) as waiter:
        table_reads = []
        earliest = waiter._earliest
        waiter._earliest = lambda after: table_reads.append(after) or earliest(after)

        def reads_of(timeout: float, found: bool = False) -> int:
            del table_reads[:]
            assert waiter.wait(wakeup, timeout) is found
            return len(table_reads)

        assert reads_of(1.0) == 2  # when the next job falls due; the timeout's read
        assert reads_of(1.0) == 1  # begun at once: only its timeout's read
        clock.now += 2 * DUE_READ_KEPT
        assert reads_of(1.0) == 2  # begun later: it reads when the job falls due again
        started = clock.now
        # Begun at once, and ended by the due time remembered from that timeout's read
        # (the probes, on the queue's clock, find nothing due yet), not by its timeout.
        assert reads_of(120.0, found=True) == 0
        assert clock.now - started < 120.0


@pytest.mark.backends("postgres")
def test_without_psycopg_3_the_waiter_says_once_that_it_polls(queue, wakeup, monkeypatch,
                                                              caplog):
    from caravel_lite.worker.waiting import notify
    monkeypatch.setattr(notify, "_said_no_psycopg", False)
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as with psycopg2 alone
    caplog.set_level(logging.WARNING, logger="caravel_lite")
    for _ in range(2):  # a second worker run in the same process
        waiter = waiter_for(queue, QUEUE)
        try:
            assert isinstance(waiter, NotifyWaiter) and not waiter.listening
            waiter.wait(wakeup, 0.1)  # polls: a read at its timeout, no listener
        finally:
            waiter.close()
    said = [r for r in caplog.records if "psycopg 3" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "caravel_lite[postgres]" in said[0].getMessage()
