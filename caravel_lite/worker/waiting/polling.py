"""No change signal (MariaDB/MySQL, or a PostgreSQL listener that is down): a cheap read
of whether anything is due, at the poll rates."""
from __future__ import annotations

from typing import Any, Sequence, Union

import peewee

from caravel_lite.clock import now_micros
from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import Priority
from caravel_lite.worker.waiting.base import LEASED, PENDING, Waiter

__all__ = ["PollWaiter"]


def _due_now_sql(p: str, queue_count: int) -> str:
    """Whether any job of the queues is claimable at a given instant, as cheaply as it
    can be asked (two EXISTS, two parameters per queue): the poll probe's statement.
    The pending one names every priority, so that it is a short range of the claim
    index (queue, state, priority, available_at) per queue and priority, whose first
    entry answers; with only (queue, state) to go on, the databases read every pending
    row of the queue, so each probe of a queue holding many delayed jobs read them all.
    Params: the names, now_ms, the names again, now_ms."""
    t = JOBS_TABLE
    names = ", ".join([p] * queue_count)
    priorities = ", ".join(str(int(priority)) for priority in Priority)
    return (f"SELECT EXISTS (SELECT 1 FROM {t} WHERE queue IN ({names}) "
            f"AND state = '{PENDING}' AND priority IN ({priorities}) "
            f"AND available_at <= {p} AND attempts < max_attempts), "
            f"EXISTS (SELECT 1 FROM {t} WHERE queue IN ({names}) AND state = '{LEASED}' "
            f"AND lease_expires_at <= {p})")


class PollWaiter(Waiter):
    """No change signal: every :data:`POLL_PROBE` seconds (:data:`IDLE_POLL_PROBE` when
    idle), one cheap read of whether anything of its queues is due now (a job that
    falls due is found within that long of its due time, so later due times need not
    be remembered between probes)."""

    def __init__(self, queue: Any, queue_names: Union[str, Sequence[str]]) -> None:
        super().__init__(queue, queue_names)
        self.due_now_sql = _due_now_sql(queue.db.param, len(self.queue_names))

    def _confirmed(self) -> bool:
        now_ms = now_micros(self.queue.clock) // 1000
        params = [*self.queue_names, now_ms, *self.queue_names, now_ms]
        self.reads += 1
        try:
            row = self.queue.db.execute_sql(self.due_now_sql, params).fetchone()
        except peewee.DatabaseError as exc:
            logger.debug("waiter: due probe failed (%s)", type(exc).__name__,
                         extra=fields(error_type=type(exc).__name__))
            return False  # the read at the timeout tries again and lets the claim see it
        return bool(row[0] or row[1])
