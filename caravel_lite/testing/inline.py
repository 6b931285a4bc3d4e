"""InlineQueue: the synchronous driver for tests. Enqueueing also runs the job.

An InlineQueue is a :class:`DatabaseQueue` in every respect (same tables, same
validation, same idempotency); after a job is written it is run by :func:`drain`, that
is by the real worker path, in the calling thread:

- outside a transaction, at once, before ``enqueue`` returns;
- inside a transaction on the queue's database, when that transaction commits (Peewee's
  ``after_commit``); a transaction that rolls back runs nothing, and neither does a
  savepoint that rolled back the job's row (drain finds no row to run).

A handler that enqueues more jobs on the same InlineQueue does not start a nested
drain: the jobs are run by the drain already running, after the current job, so the
order is that of a worker and the stack stays flat.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple, TypeVar

import peewee

from caravel_lite.errors import InvalidField
from caravel_lite.job_options import queue_of
from caravel_lite.queue import DatabaseQueue
from caravel_lite.testing.drain import DrainResult, Scope, drain
from caravel_lite.values import Dispatch, EnqueueResult

__all__ = ["InlineQueue"]

T = TypeVar("T")

# Bounds the jobs one inline run may take (a job that keeps enqueueing itself).
MAX_INLINE_JOBS = 1000


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.writing = 0          # nesting of our own enqueue methods in this thread
        self.running = False      # a drain started by this queue runs in this thread
        self.waiting: Set[str] = set()  # queue names enqueued to while it runs


class InlineQueue(DatabaseQueue):
    """A DatabaseQueue whose ``enqueue``, ``enqueue_many`` and ``enqueue_envelope``
    (the relay's) run the job through :func:`drain` once it is committed.

    Construct it like a DatabaseQueue, or with :meth:`like` from an existing queue.
    ``scope`` is passed to the worker. ``results`` keeps each inline run's
    :class:`DrainResult`, newest last. Failures are recorded as a worker records them
    (a failing job is retried after its back-off by a later drain, not at once).
    """

    def __init__(self, *args: Any, scope: Optional[Scope] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if scope is not None and not callable(scope):
            raise InvalidField("scope", "must be a callable returning a context manager")
        self.scope = scope
        self.results: List[DrainResult] = []
        self._inline = _ThreadState()

    @classmethod
    def like(cls, queue: DatabaseQueue, *, scope: Optional[Scope] = None) -> "InlineQueue":
        """An InlineQueue over ``queue``'s database, registry, options, clock and
        telemetry."""
        if not isinstance(queue, DatabaseQueue):
            raise InvalidField("queue", "must be a caravel_lite.DatabaseQueue")
        return cls(queue.db, queue.registry, queue.options, clock=queue.clock,
                   telemetry=queue.telemetry, scope=scope)

    # -- the enqueue methods -------------------------------------------------------------

    def enqueue(self, job: Any, dispatch: Dispatch) -> EnqueueResult:
        return self._write(lambda: super(InlineQueue, self).enqueue(job, dispatch),
                           lambda _: [queue_of(self.registry, job, dispatch)])

    def enqueue_many(self, items: Sequence[Tuple[Any, Dispatch]]) -> List[EnqueueResult]:
        return self._write(lambda: super(InlineQueue, self).enqueue_many(items),
                           lambda _: [queue_of(self.registry, job, dispatch)
                                      for job, dispatch in items])

    def enqueue_envelope(self, envelope: Any, job_id: Any,
                         now_us: Optional[int] = None) -> EnqueueResult:
        return self._write(
            lambda: super(InlineQueue, self).enqueue_envelope(envelope, job_id, now_us),
            lambda _: [envelope.queue])

    # -- running -------------------------------------------------------------------------

    def _write(self, write: Callable[[], T], names: Callable[[T], List[str]]) -> T:
        state = self._inline
        if state.writing == 0:
            _refuse_manual_commit(self.db)
        state.writing += 1
        try:
            result = write()
        finally:
            state.writing -= 1
        if state.writing == 0:  # the outermost of our methods: enqueue calls the others
            self._run_after_commit(names(result))
        return result

    def _run_after_commit(self, names: List[str]) -> None:
        wanted = list(dict.fromkeys(names))
        if self.db.in_transaction():
            self.db.after_commit(lambda: self._run(wanted))
        else:
            self._run(wanted)

    def _run(self, names: List[str]) -> None:
        state = self._inline
        state.waiting.update(names)
        if state.running:
            return  # the drain running in this thread takes them after the current job
        state.running = True
        try:
            budget = MAX_INLINE_JOBS
            exhausted = False
            while state.waiting and not exhausted:
                todo = sorted(state.waiting)
                state.waiting.clear()
                result = drain(self, *todo, max_jobs=budget, scope=self.scope)
                self.results.append(result)
                budget -= result.processed
                exhausted = result.limit_reached or budget <= 0
            if exhausted and (state.waiting or self.results[-1].limit_reached):
                state.waiting.clear()
                raise RuntimeError(f"inline mode ran {MAX_INLINE_JOBS} jobs in one go and "
                                   f"more were enqueued: does a job enqueue itself?")
        finally:
            state.running = False


def _refuse_manual_commit(db: peewee.Database) -> None:
    # Peewee cannot tell us when a manual-commit block commits (after_commit refuses
    # it); refuse before writing anything rather than run a job that may roll back.
    manual = getattr(peewee, "_manual", None)
    if manual is not None and isinstance(db.top_transaction(), manual):
        raise InvalidField("db", "InlineQueue cannot run jobs inside db.manual_commit(): "
                                 "use db.atomic() so that it knows when the job commits")
