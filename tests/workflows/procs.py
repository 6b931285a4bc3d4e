"""Entry points the workflow tests run in other processes (spawn context: each child
imports this module afresh and opens its own database from the URL)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from caravel_lite import open_database
from tests.workflows.jobs import Step, make_queue, to

TIMEOUT = 120  # generous: the machine is shared with other suites
WINDOW = timedelta(seconds=30)


def enqueue_debounced(url: str, barrier: Any, tag: str, calls: int, results: Any) -> None:
    """``calls`` debounced enqueues of one key, as fast as they go, after the barrier."""
    db = open_database(url)
    db.connect()
    try:
        queue = make_queue(db)
        barrier.wait(timeout=60)
        ids = {str(queue.enqueue(Step(f"{tag}-{n}"),
                                 to(debounce=WINDOW, debounce_key="user-7")).job_id)
               for n in range(calls)}
        results.put(sorted(ids))
    finally:
        db.close()
