"""QueueWorker: the loop that claims jobs, hands them to the executor and writes their
outcomes.

Guarantees:

- At least once. A job is acknowledged (completed, failed, snoozed, released) only while
  its own lease is still owned; a handler that ends after its lease deadline or a
  rejected renewal writes nothing, and the job is taken again once its lease expires.
- A handler's exception is a job failure (``HANDLER_FAILED``; ``Discard`` gives
  ``DISCARDED``, ``Snooze`` puts it back), never a worker fault. An unknown wire name
  (``UNKNOWN_JOB_TYPE``) or a payload that does not decode or is over the queue's
  ``max_payload_bytes`` (``INVALID_PAYLOAD``) fails the job without calling a handler.
- Infrastructure errors (the database failing while claiming, acknowledging or
  renewing) propagate out of ``run_once``/``run``, unless ``run`` was given
  ``max_outage``: then the worker rides the outage out (:mod:`caravel_lite.outage`).
- The database connections a worker holds do not grow with its concurrency: its loop
  (claims, acknowledgements, due reads), its renewer (renewals) and, on PostgreSQL,
  its listener: at most 3. Handlers run on other threads and never use them; the
  thread that enforces lease deadlines uses none.
- One owner: the state of a run (slots, waiting and running jobs, outcomes not yet
  written) belongs to its loop thread (:mod:`~caravel_lite.worker.loop`); every way a
  run ends goes through one exit path, which writes what it holds, hands back what did
  not start and leaves the worker ready for another run.
- The worker builds no SQL: every database operation goes through
  :class:`~caravel_lite.queue.DatabaseQueue` (and the waiter's due read).
"""
from __future__ import annotations

import inspect
import threading
from collections import deque
from datetime import timedelta
from typing import Deque, List, Optional, Sequence, Tuple, Union

from caravel_lite import validation
from caravel_lite.errors import InvalidField
from caravel_lite.logfields import fields
from caravel_lite.observability import Telemetry, logger
from caravel_lite.outage import OutagePolicy, check_max_outage
from caravel_lite.pausing import PausedCache
from caravel_lite.queue import MAX_BATCH, DatabaseQueue
from caravel_lite.values import QueueLease
from caravel_lite.worker import waiter as waiting
from caravel_lite.worker.acks import Acknowledgements
from caravel_lite.worker.execution import Runner, Scope
from caravel_lite.worker.executor import Executor
from caravel_lite.worker.loop import RunLoop
from caravel_lite.worker.planning import ClaimPlan, queue_names
from caravel_lite.worker.retention import IdlePruning, check_prune
from caravel_lite.worker.settling import Settler
from caravel_lite.worker.supervisor import CANCELLED, Supervisor
from caravel_lite.worker.wakeup import Wakeup

__all__ = ["QueueWorker"]

MIN_POLL = timedelta(milliseconds=100)
MAX_POLL = timedelta(minutes=5)
MAX_PREFETCH = 100
MAX_CONCURRENCY = 1000
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
MAX_SHUTDOWN_TIMEOUT = 24 * 3600.0
def _seconds(field: str, value: object, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise InvalidField(field, "must be seconds (a number) or a timedelta, "
                           f"got {type(value).__name__}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not low <= seconds <= high:
        raise InvalidField(field, f"must be between {low:g} and {high:g} seconds, got {value}")
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


class _StopWatcher:
    """Turns ``stop`` being set into a wake-up of the worker's loop (an Event cannot be
    selected on); ends with the run."""

    def __init__(self, stop: threading.Event, wakeup: Wakeup) -> None:
        self._ended = False
        self._thread = threading.Thread(target=self._main, args=(stop, wakeup),
                                        name="caravel-stop-watcher", daemon=True)
        self._thread.start()

    def _main(self, stop: threading.Event, wakeup: Wakeup) -> None:
        while not self._ended:
            if stop.wait(1.0):
                wakeup.set()
                return

    def close(self) -> None:
        self._ended = True


class QueueWorker:
    """Runs jobs of a :class:`DatabaseQueue`.

    ``concurrency`` (1..1000, default 1): how many jobs :meth:`run` runs at once. Sync
    handlers run on a pool of that many threads; ``async def`` handlers run as tasks on
    one long-lived event loop of the worker; both kinds share the same slots.

    ``prefetch`` (1..100, or None): how many jobs one claim may lease beyond the free
    slots. A claim is made when a slot is free and nothing claimed is waiting; it
    leases ``max(free slots, prefetch)`` jobs, and the ones that find no slot wait
    their turn. With None (the default) :meth:`run` keeps leased, beyond its free
    slots, about 0.1 s of expected work per slot judged from recent handler durations
    (at most 50 jobs), topping it up while the slots are busy once half of it is
    used: fast jobs are claimed in batches and their claims overlap the running jobs;
    slow ones are claimed one per free slot.
    A waiting job is never started once its lease has less than half of
    ``lease_duration`` left: it is handed back (``queue.release``, attempt given back),
    as are all waiting jobs when the worker stops.

    Completions are acknowledged in batches (one statement for many, each row fenced
    by its own lease): before each claim, before the worker blocks, when it stops, and
    as soon as the oldest waiting one has half of ``lease_duration`` left. Failures and
    snoozes are written at once.

    ``shutdown_timeout`` (seconds or a timedelta, 0..1 day, default 10 s): on stop,
    how long :meth:`run` waits for running handlers (told to stop through
    ``ctx.cancelled``; async ones are cancelled) before it returns anyway.

    ``scope``: an optional factory of a context manager entered around each handler
    call (a unit of work, a session, a logging context); one taking an argument gets
    the :class:`JobContext`. Its errors count as handler failures.

    ``poll_interval`` (seconds or a timedelta, 100 ms .. 5 min, default 1 s): how often
    an idle worker re-reads its queues when no change signal woke it.

    ``telemetry``: counters and spans; defaults to the queue's.

    ``prune`` (None, the default, or a timedelta of at least a minute): while idle,
    delete this worker's queues' jobs that finished longer ago than that, a small
    batch at a time, each followed by a pause spent waiting for work (see
    :mod:`caravel_lite.worker.retention`). Pruned idempotency keys lose their
    duplicate protection.
    """

    def __init__(self, queue: DatabaseQueue, *, concurrency: int = 1,
                 prefetch: Optional[int] = None,
                 shutdown_timeout: Union[float, timedelta] = DEFAULT_SHUTDOWN_TIMEOUT,
                 poll_interval: Union[float, timedelta] = 1.0,
                 scope: Optional[Scope] = None,
                 telemetry: Optional[Telemetry] = None,
                 prune: Optional[timedelta] = None) -> None:
        if not isinstance(queue, DatabaseQueue):
            raise InvalidField("queue", "must be a caravel_lite.DatabaseQueue")
        if scope is not None and not callable(scope):
            raise InvalidField("scope", "must be a callable returning a context manager")
        if telemetry is not None and not isinstance(telemetry, Telemetry):
            raise InvalidField("telemetry", "must be a caravel_lite Telemetry")
        self.queue = queue
        self.concurrency = validation.check_int("concurrency", concurrency, 1, MAX_CONCURRENCY)
        self.prefetch = (None if prefetch is None
                         else validation.check_int("prefetch", prefetch, 1, MAX_PREFETCH))
        self.shutdown_timeout = _seconds("shutdown_timeout", shutdown_timeout, 0,
                                         MAX_SHUTDOWN_TIMEOUT)
        self.poll_interval = _seconds("poll_interval", poll_interval,
                                      MIN_POLL.total_seconds(), MAX_POLL.total_seconds())
        self.scope = scope
        self._scope_gets_ctx = scope is not None and _scope_wants_context(scope)
        self.telemetry = telemetry or queue.telemetry
        self._acks = Acknowledgements(queue, self.telemetry)
        self._settler = Settler(queue, self._acks, self.telemetry)
        older_than = check_prune(prune)
        self._pruning = IdlePruning(queue, older_than) if older_than is not None else None
        # Renewals and due acknowledgements on one thread, deadlines on another.
        self._supervisor = Supervisor(queue, self._acks.flush_due)
        self._plan = ClaimPlan(self.concurrency, self.prefetch, MAX_BATCH)
        self._running = False  # a run() is under way (one at a time)
        # run_once's state, used by the calling thread only: leases claimed ahead, and
        # the executor an awaitable returned by a sync handler runs on.
        self._waiting: Deque[QueueLease] = deque()
        self._once: Optional[Tuple[Executor, Runner]] = None
        self._paused = PausedCache(queue.db)  # run_once claims nothing from a paused queue

    # -- the loop ------------------------------------------------------------------------

    def run(self, queue_names_: Union[str, Sequence[str]],
            stop: Optional[threading.Event] = None, *,
            max_outage: Union[None, float, timedelta] = None) -> None:
        """Process jobs of one queue or several until ``stop`` is set.

        Several queues: earlier names first (a claim takes from the first queue with
        due jobs, then the next...), except that every 4th claim round starts from the
        next queue in rotation, so every queue is served under load: of every
        ``4 * len(queues)`` claim rounds, each queue leads at least one.

        When nothing is due it waits for a sign of new work (see
        :mod:`caravel_lite.worker.waiter`) without writing anything; a stop request
        ends the wait at once.

        However the run ends (``stop``, a fault, ``KeyboardInterrupt``, ``SystemExit``)
        it ends the same way: nothing more is claimed or started; claimed jobs that did
        not start are handed back (attempt given back); running handlers are told to
        stop and get up to ``shutdown_timeout`` (none after an interrupt); one that
        returns normally in that time is completed (fenced), one that raises after
        being cancelled leaves its job leased until the lease expires; every outcome
        the worker holds is written. Then it returns normally after a stop, or raises
        what ended it; the worker can run again.

        ``max_outage``: None (the default) lets database errors propagate. Seconds (or a
        timedelta) make it ride out an outage: one warning, a jittered back-off of
        0.5 s up to 10 s, a fresh connection, and carry on; it raises only after that
        long without a successful pass, or at once for a fault waiting cannot fix.
        """
        names = queue_names(queue_names_)
        budget = check_max_outage(max_outage)
        if self._running:
            raise RuntimeError("this worker is already running")
        stop = stop if stop is not None else threading.Event()
        wakeup = Wakeup()
        policy = (OutagePolicy(budget, [self.queue.db])
                  if budget is not None else None)
        self._flush_once()  # what run_once left, before this run's loop takes over
        run = RunLoop(queue=self.queue, names=names, concurrency=self.concurrency,
                      plan=self._plan, acks=self._acks, settler=self._settler,
                      supervisor=self._supervisor, scope=self.scope,
                      scope_gets_ctx=self._scope_gets_ctx, telemetry=self.telemetry,
                      poll_interval=self.poll_interval,
                      shutdown_timeout=self.shutdown_timeout, pruning=self._pruning,
                      stop=stop, wakeup=wakeup, policy=policy)
        self._running = True
        self._supervisor.ride_out = policy is not None
        watcher = _StopWatcher(stop, wakeup)
        waiter: Optional[waiting.Waiter] = None
        logger.info("worker started on queue(s) %s, concurrency %d", ", ".join(names),
                    self.concurrency, extra=fields(queue=",".join(names)))
        try:
            try:
                # Created before the first claim, so nothing committed after it goes unseen.
                waiter = waiting.waiter_for(self.queue, names)
                run.loop(waiter)
            except BaseException as exc:
                logger.info("worker stopped by %s", type(exc).__name__,
                            extra=fields(queue=",".join(names), error_type=type(exc).__name__))
                run.finish(exc)
                raise
            run.finish(None)
        finally:
            watcher.close()
            if waiter is not None:
                waiter.close()
            wakeup.close()
            self._supervisor.ride_out = False
            self._settler.stopping = False
            self._running = False
        logger.info("worker on queue(s) %s stopped", ", ".join(names),
                    extra=fields(queue=",".join(names)))

    def close(self) -> None:
        """Write the acknowledgements still waiting, hand back the jobs claimed but not
        started, end the supervising threads and the executor. :meth:`run` does this
        when it returns; call it after driving the worker with :meth:`run_once`.
        Database errors propagate."""
        try:
            self._flush_once()
        finally:
            self._supervisor.close()
            once, self._once = self._once, None
            if once is not None:
                once[0].close()

    def _flush_once(self) -> None:
        errors: List[Exception] = []
        for step in (self._acks.flush, self._release_waiting):
            try:
                step()
            except Exception as exc:  # still hand back / close what can be
                errors.append(exc)
        if errors:
            raise errors[0]

    def flush(self) -> None:
        """Write the waiting batched acknowledgements now."""
        self._acks.flush()

    def _release_waiting(self) -> None:
        leases, self._waiting = list(self._waiting), deque()
        for lease in leases:
            self._acks.release(lease)

    # -- one job in the calling thread -------------------------------------------------------

    def run_once(self, queue_name: str, *, stop: Optional[threading.Event] = None) -> bool:
        """Process one job of ``queue_name`` in the calling thread; True if there was one
        (whatever its outcome). With ``prefetch`` unset or 1 that is one claim of one job;
        with N > 1 the job comes from the leases already taken, and a new claim of up to
        N is made when none is left (their completions are written when the batch is
        done, before the next claim, or by :meth:`close`). ``stop``, when given and set
        while the handler runs, tells it to stop. A ``KeyboardInterrupt`` or
        ``SystemExit`` raised in the handler is raised again, after the job's outcome
        (a handler failure) was written; and since an interrupt is most likely the
        process ending, with no :meth:`close` to follow, the completions this worker
        holds are written and the leases it claimed ahead handed back first."""
        validation.check_queue(queue_name)
        try:
            return self._run_once(queue_name, stop)
        except (KeyboardInterrupt, SystemExit):
            try:
                self._flush_once()
            except BaseException as exc:  # a database error, or a further interrupt
                logger.warning("run_once interrupted: not all it held was written (%s); "
                               "those jobs run again once their leases expire",
                               type(exc).__name__, extra=fields(error_type=type(exc).__name__))
            raise

    def _run_once(self, queue_name: str, stop: Optional[threading.Event]) -> bool:
        batch = (self.prefetch or 1) > 1
        lease = self._next_waiting(queue_name)
        if lease is None:
            self._acks.flush()  # before the next claim
            if self._paused.is_paused(queue_name):
                return False
            leases = self._claim_for_run_once(queue_name, self.prefetch or 1)
            if not leases:
                return False
            lease = leases[0]
            self._waiting.extend(leases[1:])
        self._acks.flush_due()
        execution = self._settler.admit(lease, batch)
        if execution is not None:
            if stop is not None and stop.is_set():
                execution.control.cancel(CANCELLED)  # shutdown already requested
            execution.take()
            self._supervisor.watch(execution.control, stop)
            self._once_runner().run(execution, finished=lambda e: self._settler.settle(
                e.control.lease, e.settlement, batch), raise_interrupts=True)
        if batch and not self._has_waiting(queue_name):
            self._acks.flush()  # the batch is done
        return True

    def _once_runner(self) -> Runner:
        if self._once is None:
            executor = Executor(1)
            runner = Runner(supervisor=self._supervisor, telemetry=self.telemetry,
                            clock=self.queue.clock, scope=self.scope,
                            scope_gets_ctx=self._scope_gets_ctx, executor=executor,
                            finished=lambda e: None)
            self._once = (executor, runner)
        return self._once[1]

    def _claim_for_run_once(self, queue_name: str, limit: int) -> List[QueueLease]:
        if limit == 1:
            lease = self.queue.claim(queue_name)
            return [lease] if lease is not None else []
        return self.queue.claim_many(queue_name, limit)

    def _next_waiting(self, queue_name: str) -> Optional[QueueLease]:
        for index, lease in enumerate(self._waiting):
            if lease.context.queue == queue_name:
                del self._waiting[index]
                return lease
        return None

    def _has_waiting(self, queue_name: str) -> bool:
        return any(lease.context.queue == queue_name for lease in self._waiting)
