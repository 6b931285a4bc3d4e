"""QueueWorker: claims jobs, runs their handlers and records the outcome.

Guarantees:

- At least once. A job is acknowledged (completed or failed) only while its lease is
  still owned; a handler that ends after its lease deadline, after a rejected renewal
  or after shutdown was requested writes nothing, and the job is taken again once its
  lease expires (that claim counts as a new attempt).
- ``run_once`` returns whether it claimed a job, not whether the job succeeded.
- A handler's exception is a job failure (``HANDLER_FAILED``), never a worker fault.
  An unknown wire name (``UNKNOWN_JOB_TYPE``) or a payload that does not decode or is
  over the queue's current ``max_payload_bytes`` (``INVALID_PAYLOAD``) fails the job
  without calling any handler. Only the category is stored.
- Infrastructure errors (the database failing while claiming, acknowledging or
  renewing) propagate out of ``run_once``/``run``; the worker never swallows them into
  a retry loop.
- The handler is told to stop (``ctx.cancelled`` set; an ``async def`` handler's task
  is cancelled) when the lease deadline passes, when a renewal is rejected or the
  lease reaches ``max_lease_lifetime``, when a renewal fails with an error, and on
  shutdown. A sync handler cannot be interrupted: it must look at ``ctx.cancelled``.
- With ``prefetch`` > 1 several jobs are leased per claim and run one after another;
  a job whose lease expired before its handler would start is not run, and
  completions are acknowledged in batches fenced lease by lease, written before any
  waiting one could expire (see :class:`QueueWorker`).
- One supervising thread per worker (not one per job) watches deadlines, renewals
  and shutdown. Lease deadlines are read from the queue's clock (so a test clock
  drives them); the worker's own waits use real monotonic time. The worker builds no SQL: every database
  operation goes through :class:`~caravel_lite.queue.DatabaseQueue`.
"""
from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import threading
from datetime import datetime, timedelta
from collections import deque
from typing import Any, Callable, ContextManager, Deque, Dict, Iterator, List, Optional, Union

from caravel_lite import codec, validation, wakeup
from caravel_lite.errors import InvalidField
from caravel_lite.observability import Telemetry, logger
from caravel_lite.outcomes import Discard, Snooze
from caravel_lite.queue import DatabaseQueue
from caravel_lite.supervision import CANCELLED, LEASE_LOST, JobControl, Supervisor
from caravel_lite.values import Failure, QueueLease

__all__ = ["QueueWorker", "handle_signals"]

SPAN_NAME = "caravel.queue.process"

# Outcomes of one processed job (the span's "outcome" attribute).
COMPLETED = "completed"
FAILED = "failed"
SNOOZED = "snoozed"
INFRASTRUCTURE_ERROR = "infrastructure_error"

MIN_POLL = timedelta(milliseconds=100)
MAX_POLL = timedelta(minutes=5)

MAX_PREFETCH = 100

Scope = Callable[..., ContextManager[Any]]


def _poll_seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise InvalidField("poll_interval", "must be seconds (a float) or a timedelta, "
                           f"got {type(value).__name__}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not MIN_POLL.total_seconds() <= seconds <= MAX_POLL.total_seconds():
        raise InvalidField("poll_interval", f"must be between 0.1 and 300 seconds, got {value}")
    return seconds


def _scope_wants_context(scope: Scope) -> bool:
    """True when the scope factory accepts the JobContext as its one argument."""
    try:
        signature = inspect.signature(scope)
    except (TypeError, ValueError):  # builtins without a signature: call with nothing
        return False
    try:
        signature.bind(object())
    except TypeError:
        return False
    return True


class QueueWorker:
    """Runs jobs of a :class:`DatabaseQueue`, one at a time, in the calling thread.

    ``scope``: an optional factory of a context manager entered around each handler
    call and exited after it, also when the handler fails (a unit of work, a database
    session, a logging context). A factory taking one argument receives the
    :class:`JobContext`. Its errors count as handler failures.

    ``poll_interval``: how long an idle :meth:`run` waits before claiming again
    (seconds or a timedelta, 100 ms .. 5 min, default 1 s).

    ``telemetry``: counters and spans; defaults to the queue's.

    ``prefetch`` (1..100, default 1): how many jobs one claim leases. With 1 the worker
    claims, runs and completes one job at a time. With N > 1 it leases up to N jobs in
    one round trip, runs them one after another (never one whose lease expired before
    its handler starts) and completes them in batches, each row still fenced by its
    own lease. Batched acknowledgements are written when the batch is done, before the
    next claim, when the worker stops or :meth:`close` is called, and as soon as the
    oldest waiting one has no more than half of ``lease_duration`` left (checked
    before each job and every 0.1 s while a handler runs), so that a completed job's
    lease cannot run out while its acknowledgement waits. Failures are recorded at
    once. Choose N so that N jobs finish well within ``lease_duration``: leased jobs
    wait their turn, and a stop leaves the claimed but unstarted ones leased until
    their lease expires (each of those claims counted an attempt, as every claim does).
    With N > 1 a span's outcome ``completed`` means the handler succeeded and its
    acknowledgement was queued; one later refused is counted as ``lease_lost``.
    """

    def __init__(self, queue: DatabaseQueue, *, scope: Optional[Scope] = None,
                 poll_interval: Union[float, timedelta] = 1.0,
                 telemetry: Optional[Telemetry] = None, prefetch: int = 1) -> None:
        if not isinstance(queue, DatabaseQueue):
            raise InvalidField("queue", "must be a caravel_lite.DatabaseQueue")
        if scope is not None and not callable(scope):
            raise InvalidField("scope", "must be a callable returning a context manager")
        if telemetry is not None and not isinstance(telemetry, Telemetry):
            raise InvalidField("telemetry", "must be a caravel_lite Telemetry")
        self.queue = queue
        self.scope = scope
        self.poll_interval = _poll_seconds(poll_interval)
        self.telemetry = telemetry or queue.telemetry
        self._scope_gets_ctx = scope is not None and _scope_wants_context(scope)
        self.prefetch = validation.check_int("prefetch", prefetch, 1, MAX_PREFETCH)
        # Leased, not yet started jobs per queue name (prefetch > 1).
        self._leased: Dict[str, Deque[QueueLease]] = {}
        # Completed jobs whose acknowledgement is not written yet (prefetch > 1); the
        # supervisor thread may flush them too, hence the lock.
        self._acks: List[QueueLease] = []
        self._acks_lock = threading.Lock()
        self._ack_margin = queue.options.lease_duration / 2
        self._acks_due: Optional[datetime] = None  # when the waiting ones must be written
        self._supervisor = Supervisor(queue, self._flush_due_acks)

    # -- the loop ------------------------------------------------------------------------

    def run(self, queue_name: str, stop: Optional[threading.Event] = None) -> None:
        """Process jobs of ``queue_name`` one after another until ``stop`` is set.

        Takes the next job at once after one finishes. When the queue is empty it waits
        for a sign of new work (PostgreSQL LISTEN/NOTIFY, SQLite ``PRAGMA data_version``,
        the next known due time; see :mod:`caravel_lite.wakeup`) or at most
        ``poll_interval``, and a stop request ends the wait at once. Wake-ups are hints
        only: a missed one delays a job by at most ``poll_interval``.
        Setting ``stop`` while a handler runs cancels it and leaves its job leased.
        Returns normally after a stop; infrastructure errors propagate.
        """
        validation.check_queue(queue_name)
        stop = stop if stop is not None else threading.Event()
        logger.info("worker started on queue %s", queue_name)
        # Created before the first claim, so nothing committed after it goes unseen.
        waiter = wakeup.waiter_for(self.queue, queue_name)
        try:
            while not stop.is_set():
                if not self.run_once(queue_name, stop=stop):
                    waiter.wait(stop, self.poll_interval)  # idle: nothing was due
        except BaseException as exc:
            logger.info("worker on queue %s stopped by %s", queue_name, type(exc).__name__)
            self._close_after(exc)
            raise
        finally:
            waiter.close()
        self.close()
        logger.info("worker on queue %s stopped", queue_name)

    def close(self) -> None:
        """Write the acknowledgements still waiting (prefetch > 1) and end the
        supervising thread. :meth:`run` does this when it returns; call it after
        driving the worker with :meth:`run_once`. Database errors propagate."""
        try:
            self.flush()
        finally:
            self._supervisor.close()

    def _close_after(self, exc: BaseException) -> None:
        # Already failing: keep what can be kept, but never hide the original error.
        try:
            self.close()
        except Exception as flush_error:
            logger.warning("worker could not write its waiting acknowledgements: %s",
                           type(flush_error).__name__)

    def flush(self) -> None:
        """Write the waiting batched acknowledgements now (prefetch > 1)."""
        with self._acks_lock:
            acks, self._acks, self._acks_due = self._acks, [], None
            if not acks:
                return
            results = self.queue.complete_many(acks)
        for lease, acknowledged in zip(acks, results):
            if acknowledged:
                logger.info("job %s on queue %s completed (attempt %d)", lease.job_id,
                            lease.context.queue, lease.attempt)
            else:
                self._lost(lease, "lease no longer owned at the batched acknowledgement")

    def _flush_due_acks(self) -> bool:
        """Flush when the oldest waiting acknowledgement is within half a lease
        duration of its expiry; True if that touched the database."""
        due = self._acks_due
        if due is None or self.queue.clock() < due:
            return False
        self.flush()
        return True

    # -- one job ---------------------------------------------------------------------------

    def run_once(self, queue_name: str, *, stop: Optional[threading.Event] = None) -> bool:
        """Process one job of ``queue_name``; True if there was one (whatever its
        outcome). With ``prefetch`` 1 that is one claim of one job; with N > 1 the job
        comes from the leases already taken, and a new claim of up to N is made only
        when none is left. ``stop``, when given and set while the handler runs,
        cancels it and leaves the job leased."""
        lease = self._next_lease(queue_name)
        if lease is None:
            return False
        logger.debug("claimed job %s (%s) on queue %s, attempt %d",
                     lease.job_id, lease.wire_name, queue_name, lease.attempt)
        attributes = {"queue": queue_name, "job_id": str(lease.job_id),
                      "wire_name": lease.wire_name}
        with self.telemetry.span(SPAN_NAME, attributes) as span:
            try:
                outcome = self._process(lease, stop)
            except (KeyboardInterrupt, SystemExit):
                # The process is being stopped; nothing was acknowledged.
                span.set("outcome", CANCELLED)
                raise
            except BaseException:
                span.set("outcome", INFRASTRUCTURE_ERROR)
                span.error()
                raise
            span.set("outcome", outcome)
            if outcome == FAILED:
                span.error()
        if self.prefetch > 1 and not self._leased.get(queue_name):
            self.flush()  # the batch is done
        return True

    def _next_lease(self, queue_name: str) -> Optional[QueueLease]:
        if self.prefetch == 1:
            return self.queue.claim(queue_name)
        leased = self._leased.get(queue_name)
        if leased:
            return leased.popleft()
        self.flush()  # before the next claim
        leases = self.queue.claim_many(queue_name, self.prefetch)
        if not leases:
            return None
        self._leased[queue_name] = deque(leases[1:])
        return leases[0]

    def _process(self, lease: QueueLease, stop: Optional[threading.Event]) -> str:
        queue_name = lease.context.queue
        definition = self.queue.registry.for_name(lease.wire_name)
        if definition is None:
            logger.warning("job %s on queue %s: wire name %s is not registered here",
                           lease.job_id, queue_name, lease.wire_name)
            return self._fail(lease, Failure.UNKNOWN_JOB_TYPE)
        if codec.utf8_size(lease.payload) > self.queue.options.max_payload_bytes:
            logger.warning("job %s on queue %s: payload over max_payload_bytes",
                           lease.job_id, queue_name)
            return self._fail(lease, Failure.INVALID_PAYLOAD)
        try:
            job = codec.decode(definition.job_type, lease.payload)
        except codec.PayloadDecodeError:
            logger.warning("job %s on queue %s: payload does not decode to %s",
                           lease.job_id, queue_name, definition.job_type.__name__)
            return self._fail(lease, Failure.INVALID_PAYLOAD)
        self._flush_due_acks()
        if self._expired(lease):
            return self._lost(lease, "lease expired before the handler started")

        control = JobControl(lease)
        if stop is not None and stop.is_set():
            control.cancel(CANCELLED)  # shutdown already requested: do not start it
        self._supervisor.watch(control, stop)
        handler_error: Optional[BaseException] = None
        try:
            try:
                self._call_handler(definition.handler, job, control)
            except Exception as exc:  # the application's failure, not the worker's
                handler_error = exc
            except asyncio.CancelledError as exc:  # raised by our task.cancel()
                handler_error = exc
        finally:
            self._supervisor.release(control)
        if control.error is not None:
            logger.warning("job %s on queue %s: supervision failed with %s (renewing the "
                           "lease or writing acknowledgements)",
                           lease.job_id, queue_name, type(control.error).__name__)
            raise control.error
        lease = control.lease  # the newest renewal
        if control.reason == CANCELLED:
            logger.info("job %s on queue %s cancelled by shutdown; left leased",
                        lease.job_id, queue_name)
            return CANCELLED
        if control.reason == LEASE_LOST or self._expired(lease):
            return self._lost(lease, "handler ended after its lease was lost")
        if isinstance(handler_error, Snooze):
            return self._snooze(lease, handler_error.delay)
        if handler_error is not None:
            return self._handler_failed(lease, handler_error)
        if self.prefetch > 1:
            due = lease.expires_at - self._ack_margin
            with self._acks_lock:
                self._acks.append(lease)
                # The earliest of them decides (a renewed lease expires later).
                if self._acks_due is None or due < self._acks_due:
                    self._acks_due = due
            return COMPLETED
        if not self.queue.complete(lease):
            return self._lost(lease, "lease no longer owned at completion")
        logger.info("job %s on queue %s completed (attempt %d)", lease.job_id,
                    queue_name, lease.attempt)
        return COMPLETED

    def _call_handler(self, handler: Callable[..., Any], job: Any, control: JobControl) -> None:
        ctx = control.ctx
        if self.scope is None:  # no scope: spare the context-manager machinery per job
            self._invoke(handler, job, control)
            return
        with (self.scope(ctx) if self._scope_gets_ctx else self.scope()):
            self._invoke(handler, job, control)

    def _invoke(self, handler: Callable[..., Any], job: Any, control: JobControl) -> None:
        ctx = control.ctx
        if ctx.cancelled.is_set():
            return  # stopped before it started: the outcome is decided by reason
        result = handler(job, ctx)
        if inspect.isawaitable(result):
            self._run_async(result, control)

    @staticmethod
    def _run_async(awaitable: Any, control: JobControl) -> None:
        """Run an async handler on a fresh event loop in this thread; the supervisor
        cancels its task for real. Cleans up like ``asyncio.run``."""
        loop = asyncio.new_event_loop()
        try:
            task = loop.create_task(_as_coroutine(awaitable))
            control.attach(loop, task)
            try:
                loop.run_until_complete(task)
            finally:
                control.detach()
        finally:
            try:
                leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
                for leftover in leftovers:
                    leftover.cancel()
                if leftovers:
                    loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.run_until_complete(loop.shutdown_default_executor())
            finally:
                loop.close()

    # -- outcomes --------------------------------------------------------------------------

    def _expired(self, lease: QueueLease) -> bool:
        # Owned means expiry strictly after now: at expiry == now it is already lost.
        return self.queue.clock() >= lease.expires_at

    def _fail(self, lease: QueueLease, failure: Failure) -> str:
        if self._expired(lease):
            return self._lost(lease, "lease expired before the failure was recorded")
        if not self.queue.fail(lease, failure):
            return self._lost(lease, "lease no longer owned when recording the failure")
        return FAILED

    def _handler_failed(self, lease: QueueLease, error: BaseException) -> str:
        """The one place where a handler's exception becomes a failed job:
        ``Discard`` dead-letters it (DISCARDED), any other exception is HANDLER_FAILED.
        Only the category is stored; the exception's text never leaves this process."""
        failure = Failure.DISCARDED if isinstance(error, Discard) else Failure.HANDLER_FAILED
        logger.warning("job %s on queue %s: handler raised %s (%s)", lease.job_id,
                       lease.context.queue, type(error).__name__, failure.value)
        return self._fail(lease, failure)

    def _snooze(self, lease: QueueLease, delay: timedelta) -> str:
        if self._expired(lease) or not self.queue.snooze(lease, delay):
            return self._lost(lease, "lease no longer owned when snoozing")
        logger.info("job %s on queue %s snoozed for %s (attempt given back)", lease.job_id,
                    lease.context.queue, delay)
        return SNOOZED

    def _lost(self, lease: QueueLease, why: str) -> str:
        self.telemetry.count("lease_lost", lease.context.queue)
        logger.warning("job %s on queue %s not acknowledged: %s", lease.job_id,
                       lease.context.queue, why)
        return LEASE_LOST


async def _as_coroutine(awaitable: Any) -> Any:
    return await awaitable


@contextlib.contextmanager
def handle_signals(stop: threading.Event) -> Iterator[threading.Event]:
    """Make SIGTERM and SIGINT set ``stop`` while the block runs, then restore the
    previous handlers. Must be used in the main thread (Python delivers signals there).

    A second SIGINT after ``stop`` is already set raises ``KeyboardInterrupt``, so a
    handler that ignores cancellation can still be interrupted from a terminal.
    """
    def request_stop(signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and stop.is_set():
            raise KeyboardInterrupt
        logger.info("received %s; stopping after the current job",
                    signal.Signals(signum).name)
        # Set from another thread: the signal handler runs in the main thread, which
        # may be inside stop.wait() holding the event's internal lock, and Event.set()
        # would then deadlock on it.
        threading.Thread(target=stop.set, name="caravel-stop", daemon=True).start()

    previous = {signum: signal.signal(signum, request_stop)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
