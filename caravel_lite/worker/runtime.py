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
  (claims, acknowledgements, due reads), its supervisor (renewals) and, on PostgreSQL,
  its listener: at most 3. Handlers run on other threads and never use them.
- The worker builds no SQL: every database operation goes through
  :class:`~caravel_lite.queue.DatabaseQueue` (and the waiter's due read).
"""
from __future__ import annotations

import functools
import inspect
import random
import threading
import time
from collections import deque
from datetime import timedelta
from typing import Deque, Dict, List, Optional, Sequence, Tuple, Union

from caravel_lite import validation
from caravel_lite.errors import InvalidField
from caravel_lite.observability import Telemetry, logger
from caravel_lite.outage import OutagePolicy, check_max_outage
from caravel_lite.queue import MAX_BATCH, DatabaseQueue
from caravel_lite.values import QueueLease
from caravel_lite.worker import waiter as waiting
from caravel_lite.worker.acks import Acknowledgements
from caravel_lite.worker.execution import (Execution, Outcome, Runner, Scope, Settlement,
                                           prepare, span_attributes, SPAN_NAME)
from caravel_lite.worker.executor import Executor
from caravel_lite.worker.planning import ClaimPlan, queue_names
from caravel_lite.worker.retention import IdlePruning, check_prune
from caravel_lite.worker.supervisor import CANCELLED, Supervisor
from caravel_lite.worker.waiter import Wakeup

__all__ = ["QueueWorker"]

MIN_POLL = timedelta(milliseconds=100)
MAX_POLL = timedelta(minutes=5)
MAX_PREFETCH = 100
MAX_CONCURRENCY = 1000
DEFAULT_SHUTDOWN_TIMEOUT = 10.0
MAX_SHUTDOWN_TIMEOUT = 24 * 3600.0
# With every slot busy, a completion waits at most this long for others to share its
# write (fast jobs: one statement for many; slow ones: written soon after they end).
ACK_LINGER = 0.05
# A claim that lost every race (another worker took the rows it saw) is repeated after
# a pause of at most this long, instead of waiting for a wake-up.
CONTENDED_PAUSE = 0.01


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
        self.telemetry = telemetry or queue.telemetry
        self._acks = Acknowledgements(queue, self.telemetry)
        older_than = check_prune(prune)
        self._pruning = IdlePruning(queue, older_than) if older_than is not None else None
        self._supervisor = Supervisor(queue, self._chore)
        self._executor = Executor(self.concurrency)
        self._runner = Runner(supervisor=self._supervisor, telemetry=self.telemetry,
                              clock=queue.clock, scope=scope,
                              scope_gets_ctx=scope is not None and _scope_wants_context(scope),
                              executor=self._executor, finished=self._finished)
        # Leased, not yet started (claim order); the supervisor may hand old ones back.
        self._waiting: Deque[QueueLease] = deque()
        self._waiting_lock = threading.Lock()
        self._stale_margin = queue.options.lease_duration / 2
        # Started and not yet settled: added by the loop thread, or by a pool thread
        # going on with the next waiting job (_pull, under _waiting_lock); removed by
        # the loop thread only, so it may also hold finished jobs not yet settled.
        self._running: Dict[int, Execution] = {}
        # Slots in use (under _waiting_lock): a sync job's from its start by the loop
        # until its pool thread stops going on with waiting jobs (_run_slot), an async
        # job's until it finishes. The loop starts jobs only in free slots.
        self._slots_taken = 0
        self._done: Deque[Execution] = deque()     # appended by handler threads
        self._wakeup: Optional[Wakeup] = None
        self._plan = ClaimPlan(self.concurrency, self.prefetch, MAX_BATCH)
        self._stopping = False
        self._waits_long = False  # the loop's wait with every slot busy and nothing to write

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

        On stop: nothing more is claimed; claimed jobs that did not start are handed
        back (attempt given back); running handlers are told to stop and get up to
        ``shutdown_timeout``; one that returns normally is completed (fenced), one
        that raises after being cancelled leaves its job leased until the lease expires.
        Then it returns normally.

        ``max_outage``: None (the default) lets database errors propagate. Seconds (or a
        timedelta) make it ride out an outage: one warning, a jittered back-off of
        0.5 s up to 10 s, a fresh connection, and carry on; it raises only after that
        long without a successful pass, or at once for a fault waiting cannot fix.
        """
        names = queue_names(queue_names_)
        budget = check_max_outage(max_outage)
        stop = stop if stop is not None else threading.Event()
        wakeup = Wakeup()
        self._wakeup = wakeup
        self._stopping = False
        watcher = _StopWatcher(stop, wakeup)
        policy = (OutagePolicy(budget, [self.queue.db], self.queue.dialect)
                  if budget is not None else None)
        self._supervisor.ride_out = policy is not None
        logger.info("worker started on queue(s) %s, concurrency %d", ", ".join(names),
                    self.concurrency)
        waiter: Optional[waiting.Waiter] = None
        try:
            # Created before the first claim, so nothing committed after it goes unseen.
            waiter = waiting.waiter_for(self.queue, names)
            self._loop(names, stop, waiter, wakeup, policy)
            self._shutdown(wakeup)
        except BaseException as exc:
            logger.info("worker stopped by %s", type(exc).__name__)
            self._abort(exc, wakeup)
            raise
        finally:
            watcher.close()
            if waiter is not None:
                waiter.close()
            self._wakeup = None
            wakeup.close()
            self._supervisor.ride_out = False
        self.close()
        logger.info("worker on queue(s) %s stopped", ", ".join(names))

    def _loop(self, names: Tuple[str, ...], stop: threading.Event, waiter: waiting.Waiter,
              wakeup: Wakeup, policy: Optional[OutagePolicy]) -> None:
        empty = False  # the last claim found nothing: claim again once the waiter says so
        while True:
            try:
                wakeup.clear()
                self._settle_done(batch=True)
                if stop.is_set():
                    return
                self._start_waiting(stop)
                free = self.concurrency - self._slots_taken
                want = self._plan.want(free, len(self._waiting))
                if want and not empty:
                    self._acks.flush()
                    claimed, contended = self._claim_round(names, want)
                    if policy is not None:
                        policy.succeeded()
                    if claimed:
                        waiter.found_work()  # a busy worker: the waiter's fast rate
                        continue
                    if contended:  # lost every race: rows are due, try again at once
                        stop.wait(random.uniform(0, CONTENDED_PAUSE))
                        continue
                    empty = True
                if free > 0 and not self._waiting:
                    self._acks.flush()  # before going idle
                    if policy is not None:
                        policy.succeeded()
                    timeout = self.poll_interval
                    if self._pruning is not None:
                        # At most one batch pruned; the wait for work that follows
                        # lasts until the next batch is due, the pause it asked for.
                        self._pruning.step(names)
                        timeout = self._pruning.wait_limit(timeout)
                    if waiter.wait(wakeup, timeout):
                        empty = False
                elif self._acks.waiting or self._done:
                    # Every slot busy: completions of fast jobs gather into one write;
                    # a job's completion is written at most ACK_LINGER after it
                    # finished. A pool thread that finishes a job meanwhile does not
                    # wake this thread (_finished), so a run of short jobs costs the
                    # loop one wake-up per linger, not one per job.
                    if not wakeup.wait(ACK_LINGER):
                        self._settle_done(batch=True)
                        self._acks.flush()
                        if policy is not None:
                            policy.succeeded()
                else:
                    # A finished job wakes this wait (_finished); the flag is raised
                    # before the last look at the finished jobs, so none slips between.
                    self._waits_long = True
                    try:
                        if not self._done:
                            wakeup.wait(self.poll_interval)
                    finally:
                        self._waits_long = False
            except Exception as exc:
                if policy is None:
                    raise
                if policy.failed(exc, stop.wait):
                    return
                empty = False

    def _claim_round(self, names: Tuple[str, ...], limit: int) -> Tuple[int, bool]:
        """Lease up to ``limit`` jobs across the queues (see :meth:`run` for the order);
        returns how many, and whether some claim lost every race for due rows."""
        total, contended = 0, False
        for name in self._plan.order(names):
            if total >= limit:
                break
            batch = self.queue.claim_batch(name, limit - total)
            leases, lost_races = list(batch.leases), batch.contended
            contended = contended or lost_races
            with self._waiting_lock:
                self._waiting.extend(leases)
            total += len(leases)
        return total, contended

    def _claim_for_run_once(self, queue_name: str, limit: int) -> List[QueueLease]:
        if limit == 1:
            lease = self.queue.claim(queue_name)
            return [lease] if lease is not None else []
        return self.queue.claim_many(queue_name, limit)

    def _start_waiting(self, stop: threading.Event) -> None:
        """Start waiting jobs in the free slots (never one whose lease is too old)."""
        while self._slots_taken < self.concurrency:
            lease = self._next_waiting(None)
            if lease is None:
                return
            execution = self._admit(lease, batch=True)
            if execution is None:
                continue
            self._running[id(execution)] = execution
            execution.started_at = time.monotonic()
            with self._waiting_lock:
                self._slots_taken += 1
            self._supervisor.watch(execution.control, stop)
            if execution.is_async:
                self._executor.spawn(functools.partial(self._runner.run_async, execution))
            else:
                self._executor.submit(functools.partial(self._run_slot, execution, stop))

    def _run_slot(self, execution: Execution, stop: threading.Event) -> None:
        """A pool thread's turn: run ``execution``, then the waiting jobs that can start
        at once (:meth:`_pull`), one after the other, without going back to the loop
        thread for each. Two thread hand-offs per job (the loop starting it, then
        hearing it finished) were most of what a short job cost the worker, and the
        handler thread sat idle through both."""
        current: Optional[Execution] = execution
        try:
            while current is not None:
                self._runner.run(current)
                current = self._pull(stop)
        finally:
            # The slot is free only now, not when its first job finished: until here
            # the loop starts nothing in it, so jobs start in claim order.
            with self._waiting_lock:
                self._slots_taken -= 1
            self._wake()  # the loop starts or claims what comes next

    def _pull(self, stop: threading.Event) -> Optional[Execution]:
        """The next waiting job, started here by the pool thread whose job just
        finished (its slot), when starting it needs nothing of the loop: the worker is
        not stopping, the lease has its margin left, the payload decodes and the
        handler is sync. Anything else stays waiting, and the loop starts or settles it
        as it always does. Registered in the running jobs under the waiting jobs' lock,
        so a shutdown either finds it there (and cancels it) or finds it waiting (and
        hands it back)."""
        with self._waiting_lock:
            if self._stopping or stop.is_set() or not self._waiting:
                return None
            lease = self._waiting[0]
            if lease.expires_at - self.queue.clock() < self._stale_margin:
                return None
            prepared = prepare(lease, self.queue, report=False)
            if not isinstance(prepared, Execution) or prepared.is_async:
                return None
            self._waiting.popleft()
            self._running[id(prepared)] = prepared
            prepared.started_at = time.monotonic()
            # Just ran down to the level at which ClaimPlan.want tops the waiting jobs
            # up: the loop claims ahead while this one runs.
            low = len(self._waiting) == self._plan.extra() // 2
        self._supervisor.watch(prepared.control, stop)
        if low:
            self._wake()
        return prepared

    def _finished(self, execution: Execution) -> None:
        """Called where a handler ran, once its outcome is decided."""
        started = execution.started_at
        if started is not None:
            self._plan.record(time.monotonic() - started)
        if execution.is_async:
            with self._waiting_lock:
                self._slots_taken -= 1  # an async job's slot ends with it
        self._done.append(execution)
        if execution.is_async or self._waits_long:
            self._wake()
        # else the loop is busy or lingers (ACK_LINGER) and settles it on its next
        # pass; a sync job's pool thread also wakes it when its slot goes idle
        # (_run_slot) or the waiting jobs run low (_pull)

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None:
            wakeup.set()

    def _settle_done(self, batch: bool) -> None:
        while self._done:
            execution = self._done.popleft()
            self._running.pop(id(execution), None)
            assert execution.settlement is not None
            self._settle(execution.control.lease, execution.settlement, batch)

    # -- stopping --------------------------------------------------------------------------

    def _shutdown(self, wakeup: Wakeup) -> None:
        with self._waiting_lock:  # no pool thread starts a waiting job after this
            self._stopping = True
        self._release_waiting()
        for execution in list(self._running.values()):
            execution.control.cancel(CANCELLED)
        deadline = time.monotonic() + self.shutdown_timeout
        while True:
            wakeup.clear()
            self._settle_done(batch=True)
            remaining = deadline - time.monotonic()
            if not self._running or remaining <= 0:
                break
            wakeup.wait(remaining)
        self._acks.flush()
        if self._running:
            logger.warning("%d handler(s) still running after the shutdown timeout "
                           "(%.0f s); their jobs stay leased until their leases expire",
                           len(self._running), self.shutdown_timeout)
            self._running.clear()

    def _abort(self, exc: BaseException, wakeup: Wakeup) -> None:
        """The run is failing: stop the handlers, keep what can be kept, never hide the
        original error. A KeyboardInterrupt (second SIGINT) does not wait for them."""
        with self._waiting_lock:  # as in _shutdown: no pool thread starts another job
            self._stopping = True
        for execution in list(self._running.values()):
            execution.control.cancel(CANCELLED)
        if not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            deadline = time.monotonic() + self.shutdown_timeout
            while self._running and time.monotonic() < deadline:
                wakeup.clear()
                try:
                    self._settle_done(batch=True)
                except Exception:
                    pass
                if self._running:
                    wakeup.wait(max(deadline - time.monotonic(), 0.0))
        self._running.clear()
        self._done.clear()
        try:
            self.close()
        except Exception as close_error:
            logger.warning("worker could not write its waiting acknowledgements or hand "
                           "back its unstarted jobs: %s", type(close_error).__name__)

    def close(self) -> None:
        """Write the acknowledgements still waiting, hand back the jobs claimed but not
        started, end the supervising thread and the executor. :meth:`run` does this
        when it returns; call it after driving the worker with :meth:`run_once`.
        Database errors propagate."""
        errors: List[Exception] = []
        for step in (self._acks.flush, self._release_waiting):
            try:
                step()
            except Exception as exc:  # still hand back / close what can be
                errors.append(exc)
        self._supervisor.close()
        self._executor.close()
        if errors:
            raise errors[0]

    def flush(self) -> None:
        """Write the waiting batched acknowledgements now."""
        self._acks.flush()

    def _release_waiting(self) -> None:
        with self._waiting_lock:
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
        while the handler runs, tells it to stop."""
        validation.check_queue(queue_name)
        batch = (self.prefetch or 1) > 1
        lease = self._next_waiting(queue_name)
        if lease is None:
            self._acks.flush()  # before the next claim
            leases = self._claim_for_run_once(queue_name, self.prefetch or 1)
            if not leases:
                return False
            lease = leases[0]
            with self._waiting_lock:
                self._waiting.extend(leases[1:])
        self._acks.flush_due()
        execution = self._admit(lease, batch)
        if execution is not None:
            if stop is not None and stop.is_set():
                execution.control.cancel(CANCELLED)  # shutdown already requested
            self._supervisor.watch(execution.control, stop)
            self._runner.run(execution, finished=lambda e: self._settle(
                e.control.lease, e.settlement, batch))
        if batch and not self._has_waiting(queue_name):
            self._acks.flush()  # the batch is done
        return True

    def _next_waiting(self, queue_name: Optional[str]) -> Optional[QueueLease]:
        with self._waiting_lock:
            for index, lease in enumerate(self._waiting):
                if queue_name is None or lease.context.queue == queue_name:
                    del self._waiting[index]
                    return lease
        return None

    def _has_waiting(self, queue_name: str) -> bool:
        with self._waiting_lock:
            return any(lease.context.queue == queue_name for lease in self._waiting)

    def _admit(self, lease: QueueLease, batch: bool) -> Optional[Execution]:
        """A waiting job about to start: an Execution, or None when it was settled here
        (expired, handed back because too old, or failed without a handler)."""
        remaining = lease.expires_at - self.queue.clock()
        if remaining <= timedelta(0):
            self._acks.lost(lease, "lease expired before the handler started")
            return None
        if remaining < self._stale_margin:
            self._acks.release(lease)  # waited too long: hand it back, attempt unused
            return None
        prepared = prepare(lease, self.queue)
        if isinstance(prepared, Execution):
            return prepared
        with self.telemetry.span(SPAN_NAME, span_attributes(lease)) as span:
            span.set("outcome", prepared.outcome.value)
            span.error()
            self._settle(lease, prepared, batch)
        return None

    def _chore(self) -> bool:
        """On the supervisor's tick while jobs run: write due acknowledgements and hand
        back waiting jobs grown too old; True if that used the database."""
        used = self._acks.flush_due()
        cutoff = self.queue.clock() + self._stale_margin
        with self._waiting_lock:
            stale = [lease for lease in self._waiting if lease.expires_at <= cutoff]
            for lease in stale:
                self._waiting.remove(lease)
        for lease in stale:
            self._acks.release(lease)
        return used or bool(stale)

    # -- outcomes --------------------------------------------------------------------------

    def _settle(self, lease: QueueLease, settlement: Optional[Settlement], batch: bool) -> None:
        """Write one job's outcome (the acknowledgements are fenced by its lease)."""
        assert settlement is not None
        outcome = settlement.outcome
        if outcome is Outcome.COMPLETED:
            if self._stopping or lease.context.cancelled.is_set():
                logger.info("job %s on queue %s returned while the worker was stopping; "
                            "acknowledging it as completed", lease.job_id, lease.context.queue)
            if batch:
                self._acks.complete_later(lease)
            else:
                self._acks.complete_now(lease)
        elif outcome is Outcome.FAILED:
            assert settlement.failure is not None
            self._acks.record_failure(lease, settlement.failure, settlement.error)
        elif outcome is Outcome.SNOOZED:
            self._acks.snooze(lease, settlement.error)  # type: ignore[arg-type]
        elif outcome is Outcome.RELEASED:
            self._acks.release(lease)
        elif outcome is Outcome.CANCELLED:
            logger.info("job %s on queue %s cancelled by shutdown; left leased until its "
                        "lease expires", lease.job_id, lease.context.queue)
        elif outcome is Outcome.LEASE_LOST:
            self._acks.lost(lease, settlement.why)
        else:  # INFRASTRUCTURE_ERROR: the supervisor could not renew
            assert settlement.error is not None
            logger.warning("job %s on queue %s: renewing its lease failed with %s",
                           lease.job_id, lease.context.queue, type(settlement.error).__name__)
            raise settlement.error
