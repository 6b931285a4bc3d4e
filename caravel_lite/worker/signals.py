"""SIGTERM and SIGINT as a stop request for a worker (or relay) in the main thread."""
from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

from caravel_lite.logfields import fields
from caravel_lite.observability import logger

__all__ = ["handle_signals"]


@contextlib.contextmanager
def handle_signals(stop: threading.Event) -> Iterator[threading.Event]:
    """Make SIGTERM and SIGINT set ``stop`` while the block runs, then restore the
    previous handlers. Must be used in the main thread (Python delivers signals there).

    A stopping worker hands back its unstarted jobs, tells running handlers to stop and
    waits up to its ``shutdown_timeout``. A second SIGINT after ``stop`` is already set
    raises ``KeyboardInterrupt`` at once, so a terminal user is never held up by a
    handler that ignores cancellation (the worker's threads are daemons).
    """
    def request_stop(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and stop.is_set():
            raise KeyboardInterrupt
        logger.info("received %s; stopping: no new jobs, running ones told to stop",
                    signal.Signals(signum).name, extra=fields(signal=signal.Signals(signum).name))
        # Set from another thread: the signal handler runs in the main thread, which
        # may be inside stop.wait() holding the event's internal lock, and Event.set()
        # would then deadlock on it.
        threading.Thread(target=stop.set, name="caravel-stop", daemon=True).start()

    previous = {signum: signal.signal(signum, request_stop)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
