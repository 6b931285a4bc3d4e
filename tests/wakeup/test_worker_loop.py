"""A real QueueWorker.run: with a working waiter it starts a job far sooner than its poll
interval; with a deaf waiter (no change signal, no probe) it still starts every job
within its poll interval, thanks to the read at each timeout; one waiter serves the
worker whatever its concurrency and queues. The waiter run() creates is wrapped (or
deafened) through caravel_lite.worker.waiter.waiter_for, looked up at call time."""
from __future__ import annotations

import threading
import time

import pytest

from caravel_lite import JobRegistry, QueueWorker
from caravel_lite.worker import waiter as waiter_module
from caravel_lite.worker.waiter import Waiter, waiter_for
from tests.wakeup.helpers import OTHER_QUEUE, QUEUE, Ping, Recording, Started, enqueue, make_queue


class _Loop:
    """QueueWorker.run in a thread over its own connection; keeps any exception."""

    def __init__(self, connect, monkeypatch, poll_interval: float, deaf: bool = False,
                 queues=(QUEUE,), concurrency: int = 1) -> None:
        self.started = Started()
        registry = JobRegistry()
        registry.register("wakeup.ping.v1", Ping, self.started)
        self.db = connect()
        self.db.connect()
        self.worker = QueueWorker(make_queue(self.db, registry), poll_interval=poll_interval,
                                  concurrency=concurrency)
        self.created = []

        def make(queue, names):
            inner = waiter_for(queue, names)
            if deaf:
                _deafen(inner)
            recording = Recording(inner)
            self.created.append((names, recording))
            return recording

        monkeypatch.setattr(waiter_module, "waiter_for", make)
        self.stop = threading.Event()
        self.errors: list = []
        self.thread = threading.Thread(target=self._main, args=(list(queues),), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.created and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self.created, "the worker made no waiter"

    @property
    def waiter(self) -> Recording:
        return self.created[0][1]

    def _main(self, queues) -> None:
        try:
            self.worker.run(queues, self.stop)  # closes the waiter on the way out
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
    """No change signal, no probe, no next-due read: it only ever times out (and then
    reads once, as every waiter does at its timeout)."""
    waiter._watch = lambda wakeup, until: wakeup.wait(max(until - time.monotonic(), 0)) and False
    waiter._next_due = lambda: None


def _pickups(loop: _Loop, other, count: int, queue_name: str = QUEUE) -> list:
    """Enqueue ``count`` jobs one at a time, each once the worker is idle again;
    returns the delays from enqueue to handler start."""
    delays = []
    for n in range(count):
        assert loop.waiter.idle.wait(10), "the worker never went idle"
        loop.started.event.clear()
        began = time.time()
        enqueue(other, n, queue_name=queue_name)
        assert loop.started.event.wait(10), f"job {n} never started"
        delays.append(loop.started.times[-1][1] - began)
    return delays


def test_an_idle_worker_starts_a_new_job_well_before_its_poll_interval(connect, backend,
                                                                        monkeypatch):
    other = make_queue(connect())
    loop = _Loop(connect, monkeypatch, poll_interval=30.0)
    try:
        delays = _pickups(loop, other, 5)
    finally:
        loop.close()
    # A 30 s poll could not start any of them this soon (a generous bound).
    assert max(delays) < 5.0, delays
    assert True in loop.waiter.results


@pytest.mark.parametrize("deaf", [False, True], ids=["real-waiter", "deaf-waiter"])
def test_jobs_start_within_the_poll_interval_even_without_wakeups(connect, deaf, monkeypatch):
    poll = 0.5
    other = make_queue(connect())
    loop = _Loop(connect, monkeypatch, poll_interval=poll, deaf=deaf)
    try:
        delays = _pickups(loop, other, 3)
    finally:
        loop.close()
    assert max(delays) < poll + 3.0, delays
    # How long each wait that found a job lasted: a deaf waiter finds a job only by the
    # read at its timeout, so each such wait lasted the whole poll interval; a waiter
    # that hears the change signal (or probes) ends its wait well before that.
    found = [took for took, result in zip(loop.waiter.durations, loop.waiter.results)
             if result]
    assert found, "no wait found a job"
    if deaf:
        assert min(found) >= 0.9 * poll, found
    else:
        assert min(found) < 0.5 * poll, found


def test_one_waiter_serves_a_worker_of_several_queues_and_slots(connect, monkeypatch):
    other = make_queue(connect())
    loop = _Loop(connect, monkeypatch, poll_interval=30.0, queues=(QUEUE, OTHER_QUEUE),
                 concurrency=4)
    try:
        delays = _pickups(loop, other, 2, queue_name=OTHER_QUEUE)
        delays += _pickups(loop, other, 2, queue_name=QUEUE)
    finally:
        loop.close()
    assert max(delays) < 5.0, delays
    assert len(loop.created) == 1 and loop.created[0][0] == (QUEUE, OTHER_QUEUE)


def test_stop_ends_an_idle_worker_loop_promptly(connect, monkeypatch):
    loop = _Loop(connect, monkeypatch, poll_interval=30.0)
    assert loop.waiter.entered.wait(10)
    stopped = time.monotonic()
    loop.close()
    assert time.monotonic() - stopped < 5.0  # far below the 30 s poll interval


def test_a_claim_that_leased_jobs_tells_the_waiter(connect, monkeypatch):
    """A worker whose claims find work (here its first one, at start-up) is a busy
    worker: its waiter then probes at the fast rate, though no wait of its found a job."""
    enqueue(make_queue(connect()), 1)  # waiting before the worker starts
    loop = _Loop(connect, monkeypatch, poll_interval=30.0)
    try:
        assert loop.started.event.wait(10), "the waiting job never started"
        assert loop.waiter.idle.wait(10), "the worker never went idle"
        assert loop.waiter.worked >= 1
        assert True not in loop.waiter.results  # found by the claim, not by a wait
    finally:
        loop.close()
