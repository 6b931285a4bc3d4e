"""The wake-up of a worker's loop: a flag any thread can raise to end the loop's wait
at once, also while its waiter blocks in ``select()`` on a socket."""
from __future__ import annotations

import os
import threading
from typing import Optional

__all__ = ["Wakeup"]


class Wakeup:
    """An event plus a self-pipe that always agree: the event is set exactly when the
    pipe holds a byte.

    :meth:`set` and :meth:`clear` change both under one lock, so no interleaving of
    the two can leave the pipe readable with the event clear (a waiter selecting on
    the pipe would then wake at once, see no wake-up and select again: a busy spin),
    nor the event set with the pipe empty (a waiter in ``select()`` would miss it).
    A set() that runs before or during a clear() is consumed by it: the loop clears
    first and then looks at everything a set() may announce, so it sees that.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._closed = False  # then the descriptors may belong to someone else
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def set(self) -> None:
        if self._event.is_set():  # already raised: nothing to add (the cheap path)
            return
        with self._lock:
            if self._event.is_set() or self._closed:
                return
            try:
                os.write(self._write, b"!")
            except (BlockingIOError, OSError):  # full (already readable) or closed
                pass
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        with self._lock:
            self._event.clear()
            if self._closed:
                return
            try:
                while os.read(self._read, 512):
                    pass
            except (BlockingIOError, OSError):
                pass

    def wait(self, timeout: Optional[float]) -> bool:
        return self._event.wait(timeout)

    def fileno(self) -> int:
        return self._read

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for fd in (self._read, self._write):
                try:
                    os.close(fd)
                except OSError:
                    pass
