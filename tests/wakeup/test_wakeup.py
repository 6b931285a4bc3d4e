"""The Wakeup's event and pipe always agree, whatever a set() and a clear() on two
threads interleave: the interleaving set-event / drain / clear / write-byte once left
the pipe readable with the event clear, so a waiter selecting on the pipe spun at full
CPU (and the wake-up was lost). The interleaving is forced here by holding set()'s pipe
write while a clear() runs."""
from __future__ import annotations

import os
import select
import sys
import threading
import time

from caravel_lite.worker.waiter import Wakeup, waiter_for

from tests.wakeup.helpers import QUEUE, make_queue


class _HeldWrite:
    """Stands for the ``os`` module of the Wakeup's module: its ``write`` waits, once
    entered, until released."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()

    def write(self, fd: int, data: bytes) -> int:
        self.entered.set()
        assert self.go.wait(10)
        return os.write(fd, data)

    def __getattr__(self, name: str):
        return getattr(os, name)


def _race(monkeypatch) -> Wakeup:
    """A set() whose pipe write is held while a clear() runs on another thread."""
    wakeup = Wakeup()
    held = _HeldWrite()
    monkeypatch.setattr(sys.modules[Wakeup.__module__], "os", held)
    setter = threading.Thread(target=wakeup.set)
    setter.start()
    assert held.entered.wait(10)
    clearer = threading.Thread(target=wakeup.clear)
    clearer.start()
    clearer.join(0.2)  # it finishes now, or waits for the set() to finish
    held.go.set()
    setter.join(10)
    clearer.join(10)
    assert not setter.is_alive() and not clearer.is_alive()
    monkeypatch.undo()
    return wakeup


def _readable(wakeup: Wakeup) -> bool:
    return bool(select.select([wakeup.fileno()], [], [], 0)[0])


def test_a_set_racing_a_clear_leaves_the_event_and_the_pipe_agreeing(monkeypatch):
    wakeup = _race(monkeypatch)
    try:
        assert wakeup.is_set() == _readable(wakeup)
        wakeup.set()  # and it still works both ways afterwards
        assert wakeup.is_set() and _readable(wakeup)
        wakeup.clear()
        assert not wakeup.is_set() and not _readable(wakeup)
    finally:
        wakeup.close()


def test_after_the_race_a_waiter_sleeps_instead_of_spinning(db, monkeypatch):
    """On every database: a second's wait after the race costs a small fraction of a
    second of CPU (the PostgreSQL waiter selects on the pipe; it spun at full CPU)."""
    waiter = waiter_for(make_queue(db), QUEUE)
    wakeup = _race(monkeypatch)
    try:
        began = time.monotonic()
        cpu = time.thread_time()
        woken = wakeup.is_set()
        found = waiter.wait(wakeup, 1.0)
        used = time.thread_time() - cpu
        assert not found
        if not woken:  # the race left nothing raised: the whole second was waited
            assert time.monotonic() - began >= 0.9
        assert used < 0.25, f"{used:.2f} s of CPU in a 1 s wait"
    finally:
        waiter.close()
        wakeup.close()
