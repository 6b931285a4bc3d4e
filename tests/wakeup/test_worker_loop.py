"""A real QueueWorker.run: with a working waiter it starts a job far sooner than its poll
interval; with a waiter that never wakes it still starts every job within its poll
interval. The waiter run() creates is wrapped (or deafened) through
caravel_lite.wakeup.waiter_for, which run() looks up at call time."""
from __future__ import annotations

import threading
import time

import pytest

from caravel_lite import JobRegistry, QueueWorker, wakeup
from caravel_lite.wakeup import Waiter, waiter_for
from tests.wakeup.helpers import QUEUE, Ping, Recording, Started, enqueue, make_queue


class _Loop:
    """QueueWorker.run in a thread over its own connection; keeps any exception."""

    def __init__(self, connect, monkeypatch, poll_interval: float, deaf: bool = False) -> None:
        self.started = Started()
        registry = JobRegistry()
        registry.register("wakeup.ping.v1", Ping, self.started)
        self.db = connect()
        self.db.connect()
        self.worker = QueueWorker(make_queue(self.db, registry), poll_interval=poll_interval)
        inner = waiter_for(self.worker.queue, QUEUE)  # before the first claim
        if deaf:
            _deafen(inner)
        self.waiter = Recording(inner)
        monkeypatch.setattr(wakeup, "waiter_for", lambda queue, name: self.waiter)
        self.stop = threading.Event()
        self.errors: list = []
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        try:
            self.worker.run(QUEUE, self.stop)  # closes the waiter on the way out
        except BaseException as exc:  # reported by close()
            self.errors.append(exc)
        finally:
            self.db.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive(), "worker loop did not stop"
        if self.errors:
            raise self.errors[0]


def _deafen(waiter: Waiter) -> None:
    """Break a waiter's change signal and due-time reads: it only ever times out."""
    waiter._watch = lambda stop, until: Waiter._watch(waiter, stop, until)
    waiter._next_due = lambda: None


def _pickups(loop: _Loop, other, count: int) -> list:
    """Enqueue ``count`` jobs one at a time, each once the worker is idle again;
    returns the delays from enqueue to handler start."""
    delays = []
    for n in range(count):
        assert loop.waiter.idle.wait(10), "the worker never went idle"
        loop.started.event.clear()
        began = time.time()
        enqueue(other, n)
        assert loop.started.event.wait(10), f"job {n} never started"
        delays.append(loop.started.times[-1][1] - began)
    return delays


@pytest.mark.change_signal("notify", "data_version")
def test_an_idle_worker_starts_a_new_job_well_before_its_poll_interval(connect, backend,
                                                                        monkeypatch):
    other = make_queue(connect())
    loop = _Loop(connect, monkeypatch, poll_interval=30.0)
    try:
        delays = _pickups(loop, other, 5)
    finally:
        loop.close()
    # A 30 s poll could not start any of them this soon.
    assert max(delays) < 1.0, delays
    assert True in loop.waiter.results


@pytest.mark.parametrize("deaf", [False, True], ids=["real-waiter", "deaf-waiter"])
def test_jobs_start_within_the_poll_interval_even_without_wakeups(connect, deaf, monkeypatch):
    poll = 0.3
    other = make_queue(connect())
    loop = _Loop(connect, monkeypatch, poll_interval=poll, deaf=deaf)
    try:
        delays = _pickups(loop, other, 3)
    finally:
        loop.close()
    assert max(delays) < poll + 0.7, delays
    if deaf:
        assert True not in loop.waiter.results  # only the poll ever ended a wait


def test_stop_ends_an_idle_worker_loop_promptly(connect, monkeypatch):
    loop = _Loop(connect, monkeypatch, poll_interval=30.0)
    assert loop.waiter.entered.wait(10)
    stopped = time.monotonic()
    loop.close()
    assert time.monotonic() - stopped < 1.0
