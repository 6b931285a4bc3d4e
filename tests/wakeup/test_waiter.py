"""caravel_lite.wakeup on every database: a waiter wakes soon after another connection
or process commits a job, ends at once on stop, wakes when a delayed job or an expired
lease becomes claimable, and falls back to polling when its change signal fails."""
from __future__ import annotations

import multiprocessing
import threading
import time
from datetime import timedelta

import pytest

from caravel_lite import Dispatch, migrate, open_database
from caravel_lite.dialect import dialect_of
from caravel_lite.schema import build_model, job_columns
from caravel_lite.wakeup import (DataVersionWaiter, NotifyWaiter, PollWaiter, Waiter,
                                 waiter_for)
from tests.support import wait_for
from tests.wakeup import procs
from tests.wakeup.helpers import (OTHER_QUEUE, QUEUE, TENANT, Ping, Recording, enqueue,
                                  make_queue, timed_wait)

# Far longer than any wake-up: a wait that ends well before it was woken by a signal.
LONG = 30.0


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


def test_the_dialect_chooses_the_strategy(queue, waiter):
    expected = {"notify": NotifyWaiter, "data_version": DataVersionWaiter,
                "poll": PollWaiter}[dialect_of(queue.db).change_signal]
    assert type(waiter) is expected
    assert waiter.signal == dialect_of(queue.db).change_signal
    if isinstance(waiter, NotifyWaiter):
        assert waiter.listening


def test_wakes_soon_after_another_process_enqueues(queue, waiter, db_url):
    ctx = multiprocessing.get_context("spawn")
    go, results = ctx.Event(), ctx.Queue()
    child = ctx.Process(target=procs.enqueue_when_told, args=(db_url, go, results))
    child.start()
    stop = threading.Event()
    try:
        if waiter.signal == "poll":
            # No change signal: the enqueue is seen by the claim after the timeout.
            go.set()
            results.get(timeout=60)
            woken, elapsed = timed_wait(waiter, stop, 0.3)
            assert woken is False and 0.29 <= elapsed < 5
        else:
            go.set()
            woken, _ = timed_wait(waiter, stop, LONG)
            woken_at = time.time()
            started = results.get(timeout=60)
            assert woken is True
            # Woken by the signal, not by the 30 s timeout: within a second of the
            # child starting its enqueue (clocks of one machine).
            assert started - 0.05 <= woken_at < started + 1.0, woken_at - started
        assert queue.claim(QUEUE) is not None
    finally:
        child.join(60)
    assert child.exitcode == 0


@pytest.mark.change_signal("notify", "data_version")
def test_wakes_soon_after_another_connection_enqueues(queue, other, waiter):
    stop = threading.Event()
    for n in range(3):  # and again after each wake-up
        timer = threading.Timer(0.1, enqueue, args=(other, n))
        timer.start()
        woken, elapsed = timed_wait(waiter, stop, LONG)
        timer.join()
        assert woken is True and elapsed < 1.0, elapsed
        lease = wait_for(lambda: queue.claim(QUEUE), timeout=5, message="the job")
        assert queue.complete(lease)


def test_times_out_when_nothing_changes(waiter):
    woken, elapsed = timed_wait(waiter, threading.Event(), 0.3)
    assert woken is False
    assert 0.29 <= elapsed < 5


def test_stop_ends_the_wait_at_once(waiter):
    stop = threading.Event()
    outcome = []
    recording = Recording(waiter)
    thread = threading.Thread(target=lambda: outcome.append(timed_wait(recording, stop, LONG)))
    thread.start()
    assert recording.entered.wait(10)
    stopped_at = time.monotonic()
    stop.set()
    thread.join(LONG)
    assert not thread.is_alive()
    ended = time.monotonic() - stopped_at
    assert outcome and outcome[0][0] is False
    assert ended < 0.5, ended


def test_a_stop_set_before_the_wait_returns_at_once(waiter):
    stop = threading.Event()
    stop.set()
    woken, elapsed = timed_wait(waiter, stop, LONG)
    assert woken is False and elapsed < 0.2


@pytest.mark.parametrize("when", ["before-wait", "before-waiter"])
def test_wakes_when_a_delayed_job_falls_due(queue, other, when):
    """Whether the job was committed before the waiter existed or before the wait began
    (found by reading the table), the waiter wakes when it is due, not at the 30 s
    timeout."""
    _wakes_when_due(queue, other, when)


@pytest.mark.change_signal("notify", "data_version")
def test_wakes_when_a_delayed_job_committed_during_the_wait_falls_due(queue, other):
    """Learned from the change signal (without one, the job is seen at the next poll)."""
    _wakes_when_due(queue, other, "during-wait")


def _wakes_when_due(queue, other, when: str) -> None:
    delay = 0.6
    waiter = None if when == "before-waiter" else waiter_for(queue, QUEUE)
    if when == "during-wait":
        timer = threading.Timer(0.1, enqueue, args=(other, 1), kwargs={"delay": delay})
        due = time.monotonic() + 0.1 + delay
        timer.start()
    else:
        enqueue(other, 1, delay=delay)
        due = time.monotonic() + delay
        timer = None
    waiter = waiter or waiter_for(queue, QUEUE)
    stop = threading.Event()
    try:
        lease = None
        while lease is None and time.monotonic() < due + LONG:
            waiter.wait(stop, LONG)
            lease = queue.claim(QUEUE)
        claimed = time.monotonic()
    finally:
        waiter.close()
        if timer is not None:
            timer.join()
    assert lease is not None
    assert due - 0.05 <= claimed < due + 0.5, claimed - due


def test_wakes_when_a_lease_expires(queue, other):
    stale = make_queue(other.db, lease_duration=timedelta(seconds=1))
    enqueue(other, 1)
    first = stale.claim(QUEUE)  # a worker that then vanishes
    assert first is not None
    expires = time.monotonic() + 1.0
    stop = threading.Event()
    with waiter_for(queue, QUEUE) as waiter:
        lease = None
        while lease is None and time.monotonic() < expires + LONG:
            waiter.wait(stop, LONG)
            lease = queue.claim(QUEUE)
        taken = time.monotonic()
    assert lease is not None and lease.job_id == first.job_id and lease.attempt == 2
    assert taken < expires + 0.6, taken - expires


@pytest.mark.change_signal("notify")  # only notifications name their queue
def test_a_job_of_another_queue_does_not_wake_a_listener(other, waiter):
    enqueue(other, 1, queue_name=OTHER_QUEUE)
    woken, elapsed = timed_wait(waiter, threading.Event(), 0.4)
    assert woken is False and elapsed >= 0.39


@pytest.mark.change_signal("notify")
def test_a_batch_on_two_queues_wakes_a_listener_of_each(queue, other):
    """One enqueue_many, one INSERT statement: its notifications (one per queue) wake
    the waiters of both queues, and not a waiter of a queue the batch left out."""
    names = (QUEUE, OTHER_QUEUE, "wakeup-idle")
    waiters = [Recording(waiter_for(queue, name)) for name in names]
    stop = threading.Event()
    outcomes: dict = {}

    def wait(name, waiter, timeout):
        outcomes[name] = timed_wait(waiter, stop, timeout)

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
        stop.set()
        for thread in threads:
            thread.join(LONG)
        for waiter in waiters:
            waiter.close()
    for name in (QUEUE, OTHER_QUEUE):
        woken, elapsed = outcomes[name]
        assert woken is True and elapsed < 2.0, (name, elapsed)
    woken, elapsed = outcomes["wakeup-idle"]
    assert woken is False and elapsed >= 0.99
    assert len(queue.claim_many(QUEUE, 10)) == 5
    assert len(queue.claim_many(OTHER_QUEUE, 10)) == 5


def test_a_closed_waiter_refuses_to_wait(queue):
    waiter = waiter_for(queue, QUEUE)
    waiter.close()
    waiter.close()  # idempotent
    with pytest.raises(RuntimeError):
        waiter.wait(threading.Event(), 0.1)


def test_an_unknown_queue_name_is_refused(queue):
    with pytest.raises(ValueError):
        waiter_for(queue, "Not A Queue")


# -- failing change signals ---------------------------------------------------------------


@pytest.mark.change_signal("notify")
def test_a_killed_listener_falls_back_to_polling_then_reconnects(queue, other, waiter, db):
    pid = waiter._conn.info.backend_pid
    db.execute_sql("SELECT pg_terminate_backend(%s)", (pid,))
    stop = threading.Event()
    woken, elapsed = timed_wait(waiter, stop, 0.3)  # no exception: a plain poll
    assert woken is False and 0.29 <= elapsed < 5
    assert not waiter.listening
    waiter.reconnect_delay = 0.0
    waiter._retry_at = 0.0
    # Reconnected: what was announced while deaf is lost, so it wakes once to claim.
    woken, elapsed = timed_wait(waiter, stop, LONG)
    assert woken is True and elapsed < 5 and waiter.listening
    assert waiter._conn.info.backend_pid != pid
    timer = threading.Timer(0.1, enqueue, args=(other, 2))
    timer.start()
    woken, elapsed = timed_wait(waiter, stop, LONG)
    timer.join()
    assert woken is True and elapsed < 1.0  # notifications again


@pytest.mark.change_signal("notify")
def test_an_unreachable_listener_polls(queue, monkeypatch):
    import psycopg

    def refuse(*args, **kwargs):
        raise psycopg.OperationalError("simulated: listener cannot connect")
    monkeypatch.setattr(psycopg, "connect", refuse)
    with waiter_for(queue, QUEUE) as waiter:
        assert isinstance(waiter, NotifyWaiter) and not waiter.listening
        woken, elapsed = timed_wait(waiter, threading.Event(), 0.3)
    assert woken is False and 0.29 <= elapsed < 5


@pytest.mark.change_signal("data_version")
def test_a_failing_data_version_connection_falls_back_then_reopens(queue, other, waiter):
    waiter._conn.close()  # every further probe on it fails
    stop = threading.Event()
    woken, elapsed = timed_wait(waiter, stop, 0.3)
    assert woken is False and 0.29 <= elapsed < 5
    assert waiter._conn is None
    # Reopened on the next wait: commits while it was closed went unseen, so it wakes.
    assert waiter.wait(stop, LONG) is True
    timer = threading.Timer(0.1, enqueue, args=(other, 2))
    timer.start()
    woken, elapsed = timed_wait(waiter, stop, LONG)
    timer.join()
    assert woken is True and elapsed < 1.0


@pytest.mark.backends("sqlite")
def test_an_in_memory_sqlite_database_polls(backend):
    db = open_database("sqlite:///:memory:")
    with db.connection_context():
        migrate(db)
        with waiter_for(make_queue(db), QUEUE) as waiter:
            assert type(waiter) is PollWaiter
            woken, elapsed = timed_wait(waiter, threading.Event(), 0.2)
    assert woken is False and elapsed >= 0.19


def test_an_unreadable_next_due_time_still_waits(queue, waiter):
    """The next-due read is a hint too: a failing read leaves the plain timeout."""
    # The same columns over a table that does not exist: the read fails.
    waiter._jobs = build_model(queue.db, "caravel_missing", job_columns(dialect_of(queue.db)))
    woken, elapsed = timed_wait(waiter, threading.Event(), 0.3)
    assert woken is False and 0.29 <= elapsed < 5


def test_the_base_waiter_is_a_plain_poll(queue):
    waiter = Waiter(queue, QUEUE)
    woken, elapsed = timed_wait(waiter, threading.Event(), 0.2)
    assert woken is False and elapsed >= 0.19
