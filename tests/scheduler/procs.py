"""Scheduler processes for the convergence test (spawn context: each child imports
this module afresh and opens its own database from the URL)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, List, Tuple

from caravel_lite import DatabaseQueue, EnqueueResult, QueueOptions, QueueScheduler, open_database
from tests.scheduler.jobs import QUEUE, TENANT, Tick, registry

TIMEOUT = 120  # generous: the machine is shared with other suites


class RecordingQueue(DatabaseQueue):
    """Remembers the outcome of every enqueue (idempotency key, already enqueued)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outcomes: List[Tuple[str, bool]] = []

    def enqueue(self, job: Any, dispatch: Any) -> EnqueueResult:
        result = super().enqueue(job, dispatch)
        self.outcomes.append((dispatch.idempotency_key, result.already_enqueued))
        return result


def run_scheduler(url: str, barrier: Any, stop: Any, results: Any) -> None:
    db = open_database(url)
    db.connect()
    try:
        queue = RecordingQueue(db, registry, QueueOptions())
        scheduler = QueueScheduler(queue)
        # catch_up: a slot is lost only if both processes stall for longer than a slot,
        # which a loaded test machine can do; the window makes either one fill it in.
        scheduler.every("beat", timedelta(seconds=1), Tick(1), queue=QUEUE, tenant_id=TENANT,
                        catch_up=timedelta(seconds=5))
        barrier.wait(timeout=60)
        scheduler.run(stop=stop)
        results.put(queue.outcomes)
    finally:
        db.close()
