"""How a handler running in a worker process reports back to the benchmark.

Jobs used for latency carry their enqueue time (``time.time()``, one clock for every
process on this machine); the handler calls :func:`hit` with it, which sends the
enqueue-to-handler-start delay to the parent through a multiprocessing queue.
"""
from __future__ import annotations

import time
from typing import Any, Optional

_sink: Optional[Any] = None


def attach(sink: Any) -> None:
    """Called once in a worker process with the parent's multiprocessing queue."""
    global _sink
    _sink = sink


def hit(sent_at: Optional[float]) -> None:
    """Record that a handler started for a job enqueued at ``sent_at``."""
    started = time.time()
    if _sink is not None and sent_at is not None:
        _sink.put(started - float(sent_at))
