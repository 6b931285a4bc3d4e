"""How much a worker claims, and from which of its queues first.

- **How many.** With an explicit ``prefetch`` K, a claim is made when a slot is free
  and nothing claimed is waiting, for ``max(free slots, K)`` jobs. By default the worker
  keeps leased, beyond its free slots, about :data:`PREFETCH_BUDGET` seconds of expected
  work per slot judged from recent handler durations (at most
  :data:`DEFAULT_PREFETCH_CAP` jobs), and tops that up while the slots are busy once
  half of it is used: fast jobs are claimed in batches and their claims overlap the
  running jobs; slow ones are claimed one per free slot. Short jobs gain most from
  batched claims, and a waiting lease of a short job holds little back from others.
- **Which queue first.** Earlier queues first; every :data:`FAIR_EVERY`-th claim round
  starts from the next queue in rotation instead, so under load each of k queues leads
  at least one of every ``FAIR_EVERY * k`` rounds and none starves.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

from caravel_lite import validation
from caravel_lite.errors import InvalidField

__all__ = ["ClaimPlan", "queue_names", "PREFETCH_BUDGET", "DEFAULT_PREFETCH_CAP",
           "FAIR_EVERY"]

PREFETCH_BUDGET = 0.1
DEFAULT_PREFETCH_CAP = 50
FAIR_EVERY = 4


def queue_names(value: Union[str, Sequence[str]]) -> Tuple[str, ...]:
    """One name or several (order kept, repeats dropped), each a valid queue name."""
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names:
        raise InvalidField("queue_names", "must be a queue name or a non-empty list of them")
    unique: List[str] = []
    for name in names:
        validation.check_queue(name)
        if name not in unique:
            unique.append(name)
    return tuple(unique)


class ClaimPlan:
    """The claim decisions of one worker (used by its loop thread only)."""

    def __init__(self, concurrency: int, prefetch: Optional[int], most: int) -> None:
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.most = most  # the largest claim the queue accepts
        self.average: Optional[float] = None  # moving average of handler durations
        self.rounds = 0

    def record(self, seconds: float) -> None:
        """A handler ran this long."""
        self.average = seconds if self.average is None else 0.8 * self.average + 0.2 * seconds

    def extra(self) -> int:
        """Default prefetch: jobs to keep leased beyond the free slots."""
        if self.average is None:
            return 0  # nothing known yet: lease only for the free slots
        return min(DEFAULT_PREFETCH_CAP,
                   int(PREFETCH_BUDGET * self.concurrency / max(self.average, 1e-6)))

    def want(self, free: int, waiting: int) -> int:
        """How many jobs to claim now (0: none). Called once the waiting jobs filled
        what slots they could, so either no slot is free or nothing is waiting."""
        if self.prefetch is not None:
            return min(max(free, self.prefetch), self.most) if free and not waiting else 0
        extra = self.extra()
        if free and not waiting:
            return min(free + extra, self.most)
        if extra and waiting <= extra // 2:
            # Running low while the slots are busy: top up ahead, so that the next
            # claim's round trip overlaps the running jobs instead of following them.
            return min(extra - waiting, self.most)
        return 0

    def order(self, names: Tuple[str, ...]) -> Tuple[str, ...]:
        """The queues in the order this claim round tries them."""
        self.rounds += 1
        if len(names) > 1 and self.rounds % FAIR_EVERY == 0:
            start = (self.rounds // FAIR_EVERY) % len(names)
            return names[start:] + names[:start]
        return names
