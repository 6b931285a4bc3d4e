"""The deadline keeper: the thread that tells handlers to stop, and nothing else.

It cancels a running job (``ctx.cancelled``; an async handler's task) when its lease
deadline passes, its timeout passes (reason TIMED_OUT) or the worker's ``stop`` is set. It never touches the database: the
deadline it enforces is ``control.lease.expires_at`` as the renewer last left it, read
against the queue's clock, so a renewal that hangs (a partition that drops packets)
delays nothing here. A job whose renewal is stuck keeps its old deadline and is
cancelled at it.
"""
from __future__ import annotations

import threading
from typing import List, Optional

from caravel_lite.logfields import lease_fields
from caravel_lite.observability import logger
from caravel_lite.worker.supervisor import (CANCELLED, LEASE_LOST, SUPERVISOR_TICK,
                                            TIMED_OUT, JobControl, Ticker)

__all__ = ["DeadlineKeeper"]


class DeadlineKeeper(Ticker):
    name = "caravel-deadlines"

    def tick(self, controls: List[JobControl], stop: Optional[threading.Event]) -> float:
        wait = SUPERVISOR_TICK
        stopping = stop is not None and stop.is_set()
        now = self._registry.queue.clock()
        for control in controls:
            if control.reason is not None or control.done:
                continue
            if stopping:
                control.cancel(CANCELLED)
                continue
            remaining = (control.lease.expires_at - now).total_seconds()
            if remaining <= 0:
                logger.warning("job %s: lease deadline passed; cancelling the handler",
                               control.lease.job_id, extra=lease_fields(control.lease))
                control.cancel(LEASE_LOST)
                continue
            if control.timeout_at is not None:
                left = (control.timeout_at - now).total_seconds()
                if left <= 0:
                    logger.warning("job %s: timeout (%s) passed; cancelling the handler",
                                   control.lease.job_id, control.timeout,
                                   extra=lease_fields(control.lease, reason="timed_out"))
                    control.cancel(TIMED_OUT)
                    continue
                remaining = min(remaining, left)
            wait = min(wait, remaining)
        return wait
