"""A run's part in operator control, on the loop thread (its only user): the worker's
heartbeat row and id (:mod:`caravel_lite.heartbeats`), and which of its queues are
paused (:mod:`caravel_lite.pausing`).

Neither costs a statement per job: the paused set is read at most once a second, the
heartbeat written every ``BEAT`` seconds, both from the loop's own connection between
its claims and waits. Their errors never end a run (they are not the jobs' business):
a failed heartbeat is written again at the next beat, a failed read of the paused set
keeps the last one known.
"""
from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, FrozenSet, Optional, Sequence, Tuple

import peewee

from caravel_lite.clock import floor_ms, now_micros
from caravel_lite.heartbeats import BEAT, Heartbeats, new_worker_id
from caravel_lite.observability import logger
from caravel_lite.pausing import READ_INTERVAL, PausedCache
from caravel_lite.worker import waiter as waiting
from caravel_lite.worker.wakeup import Wakeup
from caravel_lite.logfields import fields

if TYPE_CHECKING:
    from caravel_lite.queue import DatabaseQueue
    from caravel_lite.worker.waiter import Waiter

__all__ = ["RunControl"]


class RunControl:
    """The heartbeat and the paused set of one run (``names``: its queues)."""

    def __init__(self, queue: DatabaseQueue, names: Sequence[str], concurrency: int) -> None:
        self.queue = queue
        self.names = tuple(names)
        self.concurrency = concurrency
        self.worker_id = new_worker_id()
        self._beats = Heartbeats(queue.db)
        self._paused = PausedCache(queue.db)
        self._next_beat = 0.0
        self._registered = False
        # The waiter for the queues not paused, while some are (None: all are).
        self._subset: Optional[Tuple[Tuple[str, ...], Optional[Waiter]]] = None

    def token(self) -> str:
        """A claim's lease token: this worker's id, then 64 random bits."""
        return self.worker_id + secrets.token_hex(8)

    def _now_ms(self) -> int:
        return floor_ms(now_micros(self.queue.clock))

    def tick(self, running: int) -> bool:
        """Beat when due, read the paused set when due; True when the paused set
        changed (the loop then claims again)."""
        now = time.monotonic()
        if now >= self._next_beat:
            self._next_beat = now + BEAT
            self._beat(running)
        return self._paused.refresh()

    def _beat(self, running: int) -> None:
        try:
            if self._registered and self._beats.beat(self.worker_id, running, self._now_ms()):
                return
            # Set first: an insert whose reply was lost may have written the row, which
            # the next beat then refreshes (inserting it again fails on its key, every
            # beat) and close removes.
            self._registered = True
            self._beats.register(self.worker_id, self.names, self.concurrency, self._now_ms())
        except peewee.DatabaseError as exc:
            logger.warning("worker %s: heartbeat not written (%s); tried again in %.0f s",
                           self.worker_id, type(exc).__name__, BEAT,
                           extra=fields(worker_id=self.worker_id, error_type=type(exc).__name__,
                                        component="heartbeat"))

    def until_beat(self) -> float:
        """Seconds until the next heartbeat is due (the loop's waits end by then)."""
        return max(self._next_beat - time.monotonic(), 0.0)

    def paused(self, name: str) -> bool:
        return name in self._paused.names

    def paused_names(self) -> FrozenSet[str]:
        """The queues paused as last read (every queue, not only this worker's)."""
        return self._paused.names

    def active(self) -> Tuple[str, ...]:
        return tuple(name for name in self.names if name not in self._paused.names)

    def wait(self, waiter: Waiter, wakeup: Wakeup, timeout: float) -> bool:
        """The idle wait: on the run's waiter while no queue of it is paused; else on a
        waiter of the active queues only (one that heard of due jobs in a paused queue
        would wake the loop at once, again and again), at most READ_INTERVAL so that
        a resume is seen; and until the next beat."""
        timeout = min(timeout, self.until_beat())
        if not self._paused.names.intersection(self.names):
            self._close_subset()
            return waiter.wait(wakeup, timeout)
        active = self.active()
        if self._subset is None or self._subset[0] != active:
            self._close_subset()
            self._subset = (active, waiting.waiter_for(self.queue, active) if active else None)
        subset = self._subset[1]
        timeout = min(timeout, READ_INTERVAL)
        if subset is None:
            wakeup.wait(timeout)
            return False
        return subset.wait(wakeup, timeout)

    def _close_subset(self) -> None:
        subset, self._subset = self._subset, None
        if subset is not None and subset[1] is not None:
            subset[1].close()

    def close(self) -> None:
        """The run ends: delete the heartbeat row (a clean stop), close a waiter."""
        self._close_subset()
        if not self._registered:
            return
        self._registered = False
        try:
            self._beats.remove(self.worker_id)
        except peewee.DatabaseError as exc:
            logger.warning("worker %s: heartbeat row not removed (%s); it shows as lost",
                           self.worker_id, type(exc).__name__,
                           extra=fields(worker_id=self.worker_id, error_type=type(exc).__name__,
                                        component="heartbeat"))
