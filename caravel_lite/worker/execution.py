"""One job between its claim and its acknowledgement: decoding, running the handler
(sync in a thread, ``async def`` on the event loop) and deciding the outcome.

The outcome is decided where the handler ran, as soon as it returned, from what the
handler did and what the supervisor saw; the worker's loop then writes it. The rules:

- a handler whose ``ctx.transaction()`` block committed is completed already: nothing
  more is written for it, whatever it did after the block;
- a handler that raised ``Snooze`` or ``Discard`` asked for exactly that;
- a job whose lease was lost (deadline passed, renewal refused, superseded) is never
  acknowledged;
- a handler that ran past its job's timeout fails with ``TIMED_OUT``, whatever it
  returned;
- a handler that returned normally is completed, also when a stop was requested while
  it ran (the acknowledgement is still fenced by the lease), with its return value when
  the job keeps its result (``INVALID_RESULT`` if that value cannot be stored);
- a handler that raised after being cancelled by shutdown leaves its job leased, to be
  taken again once the lease expires (it was told to stop; its error says nothing
  about the job);
- anything else a handler raises is a handler failure: any ``Exception``, and any other
  ``BaseException`` too (``SystemExit``, ``KeyboardInterrupt``, a ``CancelledError`` the
  worker did not cause), so every started execution reaches exactly one outcome and is
  reported exactly once, whatever the handler raised. Where the handler ran in the
  caller's thread (``run_once``), a ``KeyboardInterrupt`` or ``SystemExit`` is raised
  again once its outcome was reported: there it may be the process being interrupted.
"""
from __future__ import annotations

import contextlib
import enum
import inspect
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Dict, Optional

from caravel_lite import codec, effects, job_options, results, tracing
from caravel_lite.logfields import lease_fields
from caravel_lite.observability import NO_SPAN, Telemetry, logger
from caravel_lite.outcomes import Discard, Snooze
from caravel_lite.values import Failure, QueueLease
from caravel_lite.worker import timeouts
from caravel_lite.worker.supervisor import CANCELLED, LEASE_LOST, TIMED_OUT, JobControl

if TYPE_CHECKING:
    import asyncio

SPAN_NAME = "caravel.queue.process"

# asyncio is bound here by the first async job (run_async runs on the worker's event
# loop, which has imported it), not at import: it was about a seventh of caravel_lite's
# import time, and a worker running only sync handlers never needs it.
_asyncio_bound = False


def _bind_asyncio() -> None:
    global asyncio, _asyncio_bound
    import asyncio

    _asyncio_bound = True

Scope = Callable[..., ContextManager[Any]]


class Outcome(str, enum.Enum):
    """What the worker writes for a job (also the span's ``outcome`` attribute)."""

    COMPLETED = "completed"
    COMMITTED = "committed"          # completed by ctx.transaction(): nothing to write
    FAILED = "failed"
    SNOOZED = "snoozed"
    LEASE_LOST = LEASE_LOST          # nothing written; the lease runs out
    CANCELLED = CANCELLED            # cancelled by shutdown: left leased
    RELEASED = "released"            # never started: handed back
    JOB_CANCELLED = "job_cancelled"  # an operator's cancel request: ends CANCELLED
    INFRASTRUCTURE_ERROR = "infrastructure_error"


@dataclass
class Settlement:
    """What to write for one job, with the detail the write needs."""

    outcome: Outcome
    failure: Optional[Failure] = None
    error: Optional[BaseException] = None
    why: str = ""
    result: Optional[str] = None  # a COMPLETED job's kept return value, encoded


class Execution:
    """A claimed job of a known wire name whose payload decoded."""

    # One is made for every job: slots make it smaller and its attributes cheaper to set.
    __slots__ = ("lease", "origin", "traced", "handler", "job", "is_async", "queue",
                 "definition", "options", "control", "value", "committed", "settlement",
                 "started_at", "handed_at", "ended_at", "_start")

    def __init__(self, lease: QueueLease, handler: Callable[..., Any], job: Any,
                 is_async: bool, queue: Any = None, definition: Any = None,
                 options: Optional[job_options.RunOptions] = None) -> None:
        self.lease = lease
        # What its span relates to (the enqueuing span), set by the worker only while
        # tracing is configured (caravel_lite.tracing).
        self.origin: Optional[tracing.Origin] = None
        # Whether spans were recorded when the job was admitted (Settler.admit asks
        # once per job; its run's span follows that answer).
        self.traced = False
        self.handler = handler
        self.job = job
        self.is_async = is_async  # the registry's, decided once per job type
        self.queue = queue
        self.definition = definition
        self.options = options  # stored with the job; None for most jobs
        self.control = JobControl(lease)
        if options is not None:
            self.control.timeout = options.timeout
        self.value: Any = None       # what the handler returned
        self.committed = False       # its ctx.transaction() block committed
        self.settlement: Optional[Settlement] = None
        self.started_at: Optional[float] = None  # monotonic, when its handler started
        self.handed_at: Optional[float] = None   # monotonic, when the loop queued it in a run
        self.ended_at: Optional[float] = None    # monotonic, when its outcome was decided
        # Taken once, by whoever comes first: the thread about to start the handler, or
        # the worker's loop handing the job back unstarted (a stop). So a job handed to
        # a slot is started or handed back, never both, and never neither.
        self._start = threading.Lock()

    def take(self) -> bool:
        """True for the one caller that may start (or hand back) this job."""
        return self._start.acquire(blocking=False)

    @property
    def queue_name(self) -> str:
        return self.lease.context.queue


def prepare(lease: QueueLease, queue: Any) -> "Execution | Settlement":
    """Look the wire name up and decode the payload; a job that cannot run is a
    failure decided here, without calling any handler, and logged as a warning."""
    definition = queue.registry.for_name(lease.wire_name)
    if definition is None:
        logger.warning("job %s on queue %s: wire name %s is not registered here",
                       lease.job_id, lease.context.queue, lease.wire_name,
                       extra=lease_fields(lease, category=Failure.UNKNOWN_JOB_TYPE))
        return Settlement(Outcome.FAILED, Failure.UNKNOWN_JOB_TYPE)
    if codec.utf8_size(lease.payload) > queue.options.max_payload_bytes:
        logger.warning("job %s on queue %s: payload over max_payload_bytes",
                       lease.job_id, lease.context.queue,
                       extra=lease_fields(lease, category=Failure.INVALID_PAYLOAD))
        return Settlement(Outcome.FAILED, Failure.INVALID_PAYLOAD)
    try:
        job = codec.decode(definition.job_type, lease.payload)
        options = job_options.parse_stored(lease._job_options)
    except (codec.PayloadDecodeError, ValueError, TypeError) as exc:
        logger.warning("job %s on queue %s: payload or options do not decode to %s",
                       lease.job_id, lease.context.queue,
                       definition.job_type.__name__,
                       extra=lease_fields(lease, category=Failure.INVALID_PAYLOAD))
        return Settlement(Outcome.FAILED, Failure.INVALID_PAYLOAD, exc)
    return Execution(lease, definition.handler, job, definition.is_async, queue, definition,
                     options)


def span_attributes(lease: QueueLease) -> Dict[str, Any]:
    return {"queue": lease.context.queue, "job_id": lease._id_text(),
            "wire_name": lease.wire_name}


def job_span(telemetry: Telemetry, execution: "Execution") -> ContextManager[Any]:
    """The span of a job's run; the shared no-op one, with no attributes built, when
    nothing traced as the job was admitted (every job asks)."""
    if not execution.traced:
        return NO_SPAN
    return telemetry.span(SPAN_NAME, span_attributes(execution.lease), execution.origin)


class Runner:
    """Runs executions: in the calling thread (:meth:`run`) or as a task on the event
    loop (:meth:`run_async`); each ends with ``finished(execution)``."""

    def __init__(self, *, supervisor: Any, telemetry: Telemetry, clock: Callable[[], Any],
                 scope: Optional[Scope], scope_gets_ctx: bool, executor: Any,
                 finished: Callable[[Execution], None]) -> None:
        self.supervisor = supervisor
        self.telemetry = telemetry
        self.clock = clock
        self.scope = scope
        self.scope_gets_ctx = scope_gets_ctx
        self.executor = executor
        self.finished = finished

    def _enter_scope(self, execution: Execution) -> ContextManager[Any]:
        if self.scope is None:
            return contextlib.nullcontext()
        ctx = execution.control.ctx
        return self.scope(ctx) if self.scope_gets_ctx else self.scope()

    def run(self, execution: Execution,
            finished: Optional[Callable[[Execution], None]] = None,
            raise_interrupts: bool = False) -> None:
        """Run a sync handler (or any handler returning an awaitable) here, then call
        ``finished`` (default: the runner's) exactly once, inside the job's span: an
        error it raises (writing the outcome inline) marks the span
        ``infrastructure_error``. ``raise_interrupts``: a ``KeyboardInterrupt`` or
        ``SystemExit`` from the handler is raised again after that."""
        control = execution.control
        interrupt: Optional[BaseException] = None
        with job_span(self.telemetry, execution) as span:
            try:
                if control.ctx.cancelled.is_set():  # stopped before it started
                    execution.settlement = self._unstarted(control)
                else:
                    error: Optional[BaseException] = None
                    try:
                        if control.timeout is not None:
                            # Run apart, so that a handler ignoring its timeout is
                            # abandoned and its slot freed (caravel_lite.worker.timeouts).
                            timeouts.run_bounded(lambda: self._call(execution), control,
                                                 execution.queue.db, self.clock)
                        else:
                            self._call(execution)
                    except BaseException as exc:  # whatever it raised: an outcome below
                        error = exc
                    finally:
                        control.detach()
                    if isinstance(error, (KeyboardInterrupt, SystemExit)):
                        interrupt = error
                    execution.settlement = self._decide(execution, error)
            finally:
                self.supervisor.release(control)
                if execution.settlement is None:  # the worker's own code failed above
                    execution.settlement = Settlement(Outcome.CANCELLED)
                _mark(span, execution.settlement.outcome)
                execution.ended_at = time.monotonic()
                _report(span, finished or self.finished, execution)
        if raise_interrupts and interrupt is not None:
            raise interrupt

    def _call(self, execution: Execution) -> None:
        control = execution.control
        # The job of this thread, for ctx.transaction() (a plain set and reset: this
        # runs for every job).
        current = effects.CURRENT.set(execution)
        try:
            with self._enter_scope(execution):
                value = execution.handler(execution.job, control.ctx)
                if value is not None and inspect.isawaitable(value):
                    value = self.executor.run_coroutine(
                        value, lambda task: control.attach(self.executor.loop, task))
                execution.value = value
        finally:
            effects.CURRENT.reset(current)

    async def run_async(self, execution: Execution) -> None:
        """Run an ``async def`` handler as a task of the worker's event loop. Nothing
        the handler raises escapes this task (a ``SystemExit`` escaping a task would
        stop the event loop, and every async job after it with it)."""
        if not _asyncio_bound:
            _bind_asyncio()
        control = execution.control
        with job_span(self.telemetry, execution) as span:
            try:
                task = asyncio.current_task()
                assert task is not None
                control.attach(asyncio.get_running_loop(), task)
                if control.ctx.cancelled.is_set():
                    execution.settlement = self._unstarted(control)
                else:
                    error: Optional[BaseException] = None
                    # This task's own context: no reset needed when it ends.
                    effects.CURRENT.set(execution)
                    try:
                        with self._enter_scope(execution):
                            execution.value = await execution.handler(execution.job,
                                                                      control.ctx)
                    except BaseException as exc:  # whatever it raised: an outcome below
                        error = exc
                        if isinstance(exc, asyncio.CancelledError):
                            # Our cancellation ends the handler, not this task: uncancel
                            # so that the outcome is still decided and reported below.
                            uncancel = getattr(task, "uncancel", None)
                            if uncancel is not None:
                                uncancel()
                    execution.settlement = self._decide(execution, error)
            finally:
                control.detach()
                self.supervisor.release(control)  # never blocks the event loop
                if execution.settlement is None:
                    execution.settlement = Settlement(Outcome.CANCELLED)
                _mark(span, execution.settlement.outcome)
                execution.ended_at = time.monotonic()
                _report(span, self.finished, execution)

    # -- the rules ---------------------------------------------------------------------

    @staticmethod
    def _unstarted(control: JobControl) -> Settlement:
        if control.cancel_requested:
            return Settlement(Outcome.JOB_CANCELLED)
        if control.reason == CANCELLED:
            return Settlement(Outcome.RELEASED)
        return Settlement(Outcome.LEASE_LOST, why="lease lost before the handler started")

    def _decide(self, execution: Execution, error: Optional[BaseException]) -> Settlement:
        control = execution.control
        if execution.committed:  # the job's completion is in the database already
            return Settlement(Outcome.COMMITTED, error=error)
        if control.error is not None:
            return Settlement(Outcome.INFRASTRUCTURE_ERROR, error=control.error)
        lost = control.reason == LEASE_LOST or self.clock() >= control.lease.expires_at
        if lost:
            return Settlement(Outcome.LEASE_LOST, why="handler ended after its lease was lost")
        if control.cancel_requested:  # whatever the handler did after being told
            return Settlement(Outcome.JOB_CANCELLED, error=error)
        if control.reason == TIMED_OUT:
            return Settlement(Outcome.FAILED, Failure.TIMED_OUT, error)
        if isinstance(error, Snooze):
            return Settlement(Outcome.SNOOZED, error=error)
        if isinstance(error, Discard):
            return Settlement(Outcome.FAILED, Failure.DISCARDED, error)
        if error is None:
            if execution.options is not None and execution.options.keep_result:
                try:
                    text = results.encode(execution.value, execution.definition,
                                          execution.queue.options.max_result_bytes)
                except results.ResultNotStorable as exc:
                    return Settlement(Outcome.FAILED, Failure.INVALID_RESULT, exc)
                return Settlement(Outcome.COMPLETED, result=text)
            return Settlement(Outcome.COMPLETED)
        if control.reason == CANCELLED:
            return Settlement(Outcome.CANCELLED, error=error)
        return Settlement(Outcome.FAILED, Failure.HANDLER_FAILED, error)


def _report(span: Any, finished: Callable[[Execution], None], execution: Execution) -> None:
    try:
        finished(execution)
    except BaseException:
        _mark(span, Outcome.INFRASTRUCTURE_ERROR)
        raise


def _mark(span: Any, outcome: Outcome) -> None:
    span.set("outcome", outcome.value)
    if outcome in (Outcome.FAILED, Outcome.INFRASTRUCTURE_ERROR):
        span.error()
