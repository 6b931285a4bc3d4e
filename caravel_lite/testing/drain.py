"""drain(): run every due job of some queues through the real worker, for tests.

The jobs run exactly as a deployed worker runs them (:class:`caravel_lite.QueueWorker`:
the same decoding, scope, handler call and fenced acknowledgement), one at a time in
the calling thread. The outcomes are tallied from the queue's own counters
(``caravel.queue.jobs.*``), so a count says what the queue recorded, not what drain
guessed.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional, Sequence

from peewee import fn

from caravel_lite import validation
from caravel_lite.clock import floor_ms, from_ms, now_micros
from caravel_lite.errors import InvalidField
from caravel_lite.observability import Telemetry
from caravel_lite.queue import DatabaseQueue
from caravel_lite.schema import bind_models
from caravel_lite.testing.clock import ManualClock
from caravel_lite.values import JobState
from caravel_lite.worker import QueueWorker

__all__ = ["drain", "DrainResult"]

MAX_DRAIN_JOBS = 1_000_000


@dataclass(frozen=True)
class DrainResult:
    """What one :func:`drain` did. Each count is of events the queue recorded:

    - ``processed``: jobs taken and run (or failed before their handler, e.g. an
      unknown wire name);
    - ``completed``: jobs acknowledged as done;
    - ``failed``: failed attempts, whether they were ``retried`` (back to PENDING after
      the back-off) or ended the job (``failed == retried`` + attempts that
      dead-lettered the job);
    - ``dead_lettered``: jobs moved to DEAD_LETTER (attempts used up, a ``Discard``,
      or an expired lease with no attempts left);
    - ``snoozed``: jobs a handler put back with ``Snooze`` (their attempt given back);
    - ``lease_lost``: results the worker could not record because the lease was no
      longer owned (for example a handler that outlived its lease);
    - ``advanced``: how far drain moved the :class:`ManualClock`;
    - ``limit_reached``: drain stopped at ``max_jobs`` with work still due.
    """

    processed: int = 0
    completed: int = 0
    failed: int = 0
    retried: int = 0
    dead_lettered: int = 0
    snoozed: int = 0
    lease_lost: int = 0
    advanced: timedelta = timedelta(0)
    limit_reached: bool = False


# The queue's counter names (caravel_lite.observability.COUNTERS) -> DrainResult fields.
_TALLIED = {"completed": "completed", "failed": "failed", "retried": "retried",
            "deadlettered": "dead_lettered", "snoozed": "snoozed",
            "lease_lost": "lease_lost"}


class _Tally(Telemetry):
    """A Telemetry that counts what the worker and queue report, then passes every
    call on to the queue's own Telemetry (so metrics still reach the application).
    Attributes it does not define are the wrapped object's."""

    def __init__(self, inner: Telemetry) -> None:  # no super().__init__: no instruments
        self._inner = inner
        self._lock = threading.Lock()
        self.totals: Dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":  # not set yet (a copy in the making): no recursion
            raise AttributeError(name)
        return getattr(self._inner, name)

    def count(self, name: str, queue: str, amount: int = 1,
              failure: Optional[str] = None) -> None:
        if amount > 0:
            with self._lock:
                self.totals[name] = self.totals.get(name, 0) + amount
        self._inner.count(name, queue, amount, failure)

    def span(self, name: str, attributes: Dict[str, Any], origin: Any = None) -> Any:
        return self._inner.span(name, attributes, origin)


Scope = Callable[..., Any]


def drain(queue: DatabaseQueue, *queue_names: str, clock: Optional[ManualClock] = None,
          max_jobs: int = 1000, scope: Optional[Scope] = None,
          with_scheduled: bool = False) -> DrainResult:
    """Run every due job of ``queue_names`` (every queue holding jobs when none is
    named) through a :class:`QueueWorker` in this thread, until none is due, and
    return what happened. Earlier names are served first.

    Without ``clock`` time stands still: a job retried with a back-off stays PENDING
    for a later drain. With ``clock`` (the :class:`ManualClock` the queue was built
    with), whenever nothing is due drain moves the clock to the next retry of a failed
    attempt (or expiry of a lost lease) and carries on, so a test sees a failing job
    retried to success or to the dead-letter state. ``with_scheduled=True`` moves it
    also to jobs enqueued with ``not_before`` or snoozed.

    ``max_jobs`` bounds the jobs run (a job that keeps enqueueing itself would never
    let drain end); ``limit_reached`` tells that work was left. ``scope`` is passed to
    the worker (``QueueWorker(scope=...)``). Called from a coroutine (an ``async def``
    test), it drains on a helper thread and blocks until done, since the worker runs
    ``async def`` handlers on an event loop of its own. Run it while no other worker
    serves these queues; otherwise which jobs it sees, and in which order, is not
    predictable (the counts stay those of this call's own work)."""
    if not isinstance(queue, DatabaseQueue):
        raise InvalidField("queue", "must be a caravel_lite.DatabaseQueue")
    for name in queue_names:
        validation.check_queue(name, "queue_names")
    validation.check_int("max_jobs", max_jobs, 1, MAX_DRAIN_JOBS)
    if clock is not None and clock is not queue.clock:
        raise InvalidField("clock", "must be the ManualClock the queue was built with "
                                    "(DatabaseQueue(clock=...)); drain moves that clock")
    if clock is not None and not isinstance(clock, ManualClock):
        raise InvalidField("clock", "must be a caravel_lite.testing.ManualClock")

    if _loop_running():
        # Called from a coroutine (an async test): the worker runs ``async def``
        # handlers on an event loop of its own, which cannot run inside this thread's.
        # Drain on a helper thread instead, and block until it is done.
        return _on_helper_thread(lambda: _drain(queue, queue_names, clock, max_jobs,
                                                scope, with_scheduled), queue)
    return _drain(queue, queue_names, clock, max_jobs, scope, with_scheduled)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _on_helper_thread(work: Callable[[], DrainResult], queue: DatabaseQueue) -> DrainResult:
    def run() -> DrainResult:
        try:
            return work()
        finally:
            queue.db.close()  # the helper thread's own connection
    with concurrent.futures.ThreadPoolExecutor(1, "caravel-drain") as pool:
        return pool.submit(run).result()


def _drain(queue: DatabaseQueue, queue_names: Sequence[str], clock: Optional[ManualClock],
           max_jobs: int, scope: Optional[Scope], with_scheduled: bool) -> DrainResult:
    # A copy of the queue that shares everything but its telemetry: the counts are
    # tallied without touching the caller's object, which may be in use elsewhere.
    tally = _Tally(queue.telemetry)
    counted = copy.copy(queue)
    counted.telemetry = tally
    worker = QueueWorker(counted, scope=scope, prefetch=1)
    jobs: Any = bind_models(queue.db)[0]  # columns known only at run time
    start = queue.clock()
    processed = 0
    limit_reached = False
    try:
        while True:
            names = list(queue_names) or _queues_with_work(jobs)
            ran = False
            for name in names:
                if processed >= max_jobs:
                    break
                if worker.run_once(name):
                    processed += 1
                    ran = True
                    break  # start again from the first name: earlier ones first
            if processed >= max_jobs:
                limit_reached = _due_exists(jobs, names, _now_ms(queue))
                break
            if ran:
                continue
            if clock is None or not _advance(clock, jobs, names, with_scheduled):
                break
    finally:
        worker.close()
    totals = tally.totals
    fields = {field: totals.get(counter, 0) for counter, field in _TALLIED.items()}
    return DrainResult(processed=processed, advanced=queue.clock() - start,
                       limit_reached=limit_reached, **fields)


def _now_ms(queue: DatabaseQueue) -> int:
    return floor_ms(now_micros(queue.clock))


def _queues_with_work(jobs: Any) -> List[str]:
    live = jobs.state.in_([JobState.PENDING.value, JobState.LEASED.value])
    return sorted(name for (name,) in jobs.select(jobs.queue).where(live).distinct().tuples())


def _due_exists(jobs: Any, names: Sequence[str], now_ms: int) -> bool:
    if not names:
        return False
    return bool(jobs.select().where(jobs.queue.in_(list(names))
                                    & (jobs.state == JobState.PENDING.value)
                                    & (jobs.available_at <= now_ms)).exists())


def _advance(clock: ManualClock, jobs: Any, names: Sequence[str],
             with_scheduled: bool) -> bool:
    """Move ``clock`` to the next moment something becomes due; False if nothing will."""
    if not names:
        return False
    now_ms = floor_ms(now_micros(clock))
    in_queues = jobs.queue.in_(list(names))
    pending = (jobs.state == JobState.PENDING.value) & (jobs.available_at > now_ms)
    if not with_scheduled:
        pending &= jobs.attempts > 0  # waiting out the back-off of a failed attempt
    leased = (jobs.state == JobState.LEASED.value) & (jobs.lease_expires_at > now_ms)
    candidates = [
        jobs.select(fn.MIN(jobs.available_at)).where(in_queues & pending).scalar(),
        # A lease left behind (a handler that outlived it) is claimable once expired.
        jobs.select(fn.MIN(jobs.lease_expires_at)).where(in_queues & leased).scalar(),
    ]
    upcoming = [int(value) for value in candidates if value is not None]
    if not upcoming:
        return False
    target = from_ms(min(upcoming))
    if target <= clock():
        return False
    clock.set(target)
    return True
