"""Optional automatic retention: ``QueueWorker(prune=timedelta(days=7))`` deletes the
jobs of its own queues that finished (completed or dead-lettered) longer ago than that,
while it has nothing to run. Off by default: the contract deletes nothing unless asked.

One step deletes at most BATCH jobs per queue in one short transaction, then the worker
looks for work again before the next step, so pruning never delays a job by more than
one small batch. Once a step finds nothing left, the next comes PAUSE seconds later.
Pruned idempotency keys lose their duplicate protection.
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import Optional, Sequence

from caravel_lite.admin import retention
from caravel_lite.clock import now_micros
from caravel_lite.errors import InvalidField
from caravel_lite.observability import logger
from caravel_lite.queue import DatabaseQueue

BATCH = 100
PAUSE = 60.0
MIN_AGE = timedelta(minutes=1)


def check_prune(value: object) -> Optional[timedelta]:
    if value is None:
        return None
    if not isinstance(value, timedelta) or value < MIN_AGE:
        raise InvalidField("prune", "must be None or a timedelta of at least one minute "
                           "(jobs finished longer ago than that are pruned)")
    return value


class IdlePruning:
    """The worker's retention, one bounded step at a time."""

    def __init__(self, queue: DatabaseQueue, older_than: timedelta) -> None:
        self.queue = queue
        self.older_than = older_than
        self._pruner = retention.Pruner(queue.db)
        self._next = 0.0  # monotonic time of the next step

    def step(self, queue_names: Sequence[str]) -> bool:
        """Prune one batch per queue if a step is due; True if something was deleted
        (the worker then claims again and comes back for more)."""
        if time.monotonic() < self._next:
            return False
        cutoff = retention.cutoff_ms(self.older_than, now_micros(self.queue.clock))
        deleted = 0
        for name in queue_names:
            deleted += self._pruner.prune(cutoff, retention.FINISHED, name, BATCH,
                                          max_batches=1)
        if deleted:
            logger.info("pruned %d job(s) finished more than %s ago", deleted, self.older_than)
        else:
            self._next = time.monotonic() + PAUSE
        return deleted > 0
