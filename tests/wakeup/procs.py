"""Entry points run in child processes (spawn): enqueue from another process."""
from __future__ import annotations

import time
from typing import Any

from caravel_lite import open_database
from tests.wakeup.helpers import enqueue, make_queue


def enqueue_when_told(url: str, go: Any, results: Any) -> None:
    """Open the database, wait for ``go``, enqueue one job; report when the enqueue
    began (``time.time()``, comparable across processes)."""
    db = open_database(url)
    db.connect()
    try:
        queue = make_queue(db)
        go.wait(60)
        started = time.time()
        enqueue(queue, 7)
        results.put(started)
    finally:
        db.close()
