"""Optional automatic retention: ``QueueWorker(prune=timedelta(days=7))`` deletes the
jobs of its own queues that finished (completed or dead-lettered) longer ago than that,
while it has nothing to run. Off by default: the contract deletes nothing unless asked.

One step deletes at most BATCH jobs of one queue (its queues in turn) in one short
transaction, through the same paced path as ``QueueAdmin.prune``
(:class:`caravel_lite.admin.retention.Pruner`): the next step is due only after the
pause the dialect's pacing asks for after that batch, which the worker spends waiting
for new work, so pruning never delays a job by more than one small batch and other
workers' claims find the database free between two batches. Once a step finds nothing
left, the next comes PAUSE seconds later. Pruned idempotency keys lose their duplicate
protection.
"""
from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Optional, Sequence

from caravel_lite.clock import now_micros
from caravel_lite.errors import InvalidField
from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.queue import DatabaseQueue

if TYPE_CHECKING:
    from caravel_lite.admin import retention

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
    """The worker's retention, one bounded step at a time. ``timer`` (monotonic seconds)
    says when a step is due and ``pruner`` deletes (tests pass their own)."""

    def __init__(self, queue: DatabaseQueue, older_than: timedelta, *,
                 timer: retention.Timer = time.monotonic,
                 pruner: Optional[retention.Pruner] = None) -> None:
        # Imported by the worker that prunes, not by every worker's import:
        # caravel_lite.admin (where retention lives) was a fifth of caravel_lite's.
        from caravel_lite.admin import retention

        self._cutoff_ms = retention.cutoff_ms
        self._finished = retention.FINISHED
        self.queue = queue
        self.older_than = older_than
        self._pruner = pruner if pruner is not None \
            else retention.Pruner(queue.db, clock=queue.clock)
        self._timer = timer
        self._next = 0.0  # monotonic time of the next step
        self._turn = 0  # where in the worker's queues the next step starts

    def step(self, queue_names: Sequence[str]) -> bool:
        """Prune one batch of the first queue, from this step's turn on, that has old
        finished jobs, if a step is due; True if something was deleted (the worker then
        waits for work during the pause the batch asked for, and comes back)."""
        if self._timer() < self._next:
            return False
        cutoff = self._cutoff_ms(self.older_than, now_micros(self.queue.clock))
        for offset in range(len(queue_names)):
            turn = (self._turn + offset) % len(queue_names)
            deleted = self._pruner.prune(cutoff, self._finished, queue_names[turn],
                                         BATCH, max_batches=1)
            if deleted:
                self._turn = turn + 1
                self._next = self._timer() + self._pruner.last_pause
                logger.info("pruned %d job(s) of queue %s finished more than %s ago",
                            deleted, queue_names[turn], self.older_than,
                            extra=fields(queue=queue_names[turn], count=deleted))
                return True
        self._next = self._timer() + PAUSE
        return False

    def wait_limit(self, timeout: float) -> float:
        """How long the idle worker may wait for work (at most ``timeout`` seconds)
        before the next step is due."""
        return max(0.0, min(timeout, self._next - self._timer()))
