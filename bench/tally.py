"""How worker processes know a drain is over: handlers count themselves here.

A drain arms the tally with the number of jobs expected and an action that stops the
worker; handlers call :meth:`Tally.begin` when they start and :meth:`Tally.hit` when
they end. When several worker processes drain one queue
together the count is shared between them (a multiprocessing value and event handed
to each child by :func:`bench.processes.drain_in_processes`), so every worker stops
once all of them together ran the expected number. Handlers may run on several threads
at once, hence the locks; the stop action runs on a watcher thread.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional


class Tally:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = 0                           # handlers run in this process
        self.last_done: Optional[float] = None  # time.monotonic() of this process's last
        self.first_start: Optional[float] = None  # and when its first handler began
        # This process's CPU time (every thread, time.process_time()) then, and when
        # the expected number was reached: the drain's CPU, a cross-check of its rate.
        self.first_cpu: Optional[float] = None
        self.last_cpu: Optional[float] = None
        self._expected: Optional[int] = None
        self._shared_count: Any = None          # multiprocessing.Value, when shared
        self._finished: Any = threading.Event()

    def share(self, count: Any, finished: Any) -> None:
        """Count together with other processes (called in each child, before arming)."""
        self._shared_count = count
        self._finished = finished

    def arm(self, expected: int, on_done: Callable[[], None]) -> None:
        with self._lock:
            self.done = 0
            self.last_done = None
            self.last_cpu = None
            self._expected = expected
            if self._shared_count is None:
                self._finished = threading.Event()
        finished = self._finished

        def watch() -> None:
            finished.wait()
            on_done()
        threading.Thread(target=watch, name="bench-tally", daemon=True).start()

    def cut(self) -> None:
        """Stop the armed drain now, as if the expected number had run (a time budget
        spent: the caller counts what ran)."""
        self._finished.set()

    def begin(self) -> None:
        """Called by a handler when it starts (only the first call is kept)."""
        if self.first_start is None:
            with self._lock:
                if self.first_start is None:
                    self.first_start = time.monotonic()
                    self.first_cpu = time.process_time()

    def hit(self) -> None:
        with self._lock:
            self.done += 1
            self.last_done = time.monotonic()
            total = self.done
        if self._expected is None:
            return
        if self._shared_count is not None:
            with self._shared_count.get_lock():
                self._shared_count.value += 1
                total = self._shared_count.value
        if total >= self._expected:
            if self.last_cpu is None:
                self.last_cpu = time.process_time()
            self._finished.set()


TALLY = Tally()  # one per worker process (children are spawned, not forked)
