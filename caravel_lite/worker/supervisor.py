"""Supervision of running jobs: their lease deadlines, renewals and shutdown.

One long-lived thread per :class:`~caravel_lite.worker.QueueWorker` watches every job the
worker is running, however many (starting a thread per job cost more than a no-op job).
For each job it renews the lease on schedule and tells the handler to stop
(``ctx.cancelled``; an async handler's task is cancelled) when the deadline passes, a
renewal is refused or fails, or ``stop`` is set. Lease deadlines come from the queue's
clock; the thread's own waits use real time. It uses one database connection of its own
(renewals, and acknowledgements that fall due while the worker's loop is busy), opened
while jobs run and closed when none does.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from caravel_lite.observability import logger
from caravel_lite.values import JobContext, QueueLease

if TYPE_CHECKING:
    from caravel_lite.queue import DatabaseQueue

# Reasons a job was told to stop (also the span outcomes of such jobs).
LEASE_LOST = "lease_lost"
CANCELLED = "cancelled"

# Longest the supervisor sleeps between looks at the clock and the stop event while
# jobs run: it bounds how late a shutdown or a deadline reaches a running handler, and
# lets a manually advanced test clock be noticed, at a few wake-ups per second.
SUPERVISOR_TICK = 0.1
# After the last job ends the thread keeps ticking this many times, so that the next
# job of a busy worker is picked up without waking it; then it waits for a wake-up...
LINGER_TICKS = 10
# ...and after this many idle seconds the thread ends (the next job starts a new one).
IDLE_WAITS = 5
IDLE_WAIT = 1.0
# While riding out an outage, a renewal that failed is tried again this much later.
RENEWAL_RETRY = 1.0


class JobControl:
    """What the handler's thread, the worker's loop and the supervisor share for one job.

    ``reason`` is the first reason the job was told to stop (LEASE_LOST or CANCELLED).
    ``error`` is an exception the supervisor hit renewing (a worker fault unless the
    worker rides out outages).
    """

    def __init__(self, lease: QueueLease) -> None:
        self.lease = lease
        self.reason: Optional[str] = None
        self.error: Optional[BaseException] = None
        # Set once the handler returned (a flag: nothing ever waits on it).
        self.done = False
        # Held by the supervisor while it acts for this job: taken after the handler so
        # that a renewal in flight has landed before the outcome is read.
        self.busy = threading.Lock()
        self.next_renewal: Optional[float] = None
        self.finished = False   # the supervisor has nothing more to do for this job
        self.used_db = False    # the supervisor renewed it (on its own connection)
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._task: Optional[asyncio.Future[Any]] = None

    @property
    def ctx(self) -> JobContext:
        return self.lease.context

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            self.ctx.cancelled.set()
            self._cancel_task()

    def attach(self, loop: asyncio.AbstractEventLoop, task: asyncio.Future[Any]) -> None:
        with self._lock:
            self._loop, self._task = loop, task
            if self.reason is not None:
                self._cancel_task()

    def detach(self) -> None:
        with self._lock:
            self._loop = self._task = None

    def _cancel_task(self) -> None:
        if self._loop is not None and self._task is not None:
            try:
                self._loop.call_soon_threadsafe(self._task.cancel)
            except RuntimeError:  # the loop has just closed: nothing left to cancel
                pass


class Supervisor:
    """The supervising thread of one worker; started on demand, ends when idle.

    ``queue`` renews leases and gives the clock. ``chore`` is called on every tick while
    jobs run (the worker writes acknowledgements that are due, hands back prefetched
    jobs grown old); it returns True when it used the database. ``ride_out``: renewal
    and chore errors are retried later instead of cancelling the job (the worker rides
    out database outages); deadlines still cancel.
    """

    def __init__(self, queue: DatabaseQueue, chore: Callable[[], bool]) -> None:
        self._queue = queue
        self._chore = chore
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._controls: Dict[int, JobControl] = {}
        self._stop: Optional[threading.Event] = None
        self._thread: Optional[threading.Thread] = None
        self._idle = False
        self._closing = False
        self.ride_out = False
        interval = queue.options.lease_renewal_interval
        self._period = interval.total_seconds() if interval is not None else None

    # -- the worker's side -----------------------------------------------------------------

    def watch(self, control: JobControl, stop: Optional[threading.Event]) -> None:
        """Supervise ``control`` until :meth:`release`."""
        if self._period is not None:
            control.next_renewal = time.monotonic() + self._period
        remaining = (control.lease.expires_at - self._queue.clock()).total_seconds()
        with self._lock:
            self._controls[id(control)] = control
            self._stop, self._closing = stop, False
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="caravel-supervisor",
                                                daemon=True)
                self._thread.start()
            elif self._idle or remaining < 2 * SUPERVISOR_TICK:
                # A ticking thread finds the job within a tick; wake it only when it
                # sleeps longer or the deadline is closer than that.
                self._wake.set()

    def release(self, control: JobControl) -> None:
        """The handler returned: stop supervising ``control`` once any renewal in
        flight has landed (so ``control.lease`` and ``control.reason`` are final)."""
        control.done = True
        with control.busy:
            pass
        with self._lock:
            self._controls.pop(id(control), None)

    def close(self) -> None:
        """End the thread (it is started again by the next :meth:`watch`) and forget
        the jobs still watched."""
        with self._lock:
            self._closing = True
            self._controls.clear()
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def running(self) -> bool:
        return self._thread is not None

    # -- the supervising thread ----------------------------------------------------------

    def _main(self) -> None:
        db = self._queue.db
        quiet = 0  # ticks (then idle waits) since the last job
        used_db = False
        try:
            while True:
                with self._lock:
                    controls: List[JobControl] = [c for c in self._controls.values()
                                                  if not c.done]
                    stop = self._stop
                    # Closing ends the thread even with jobs left: those a shutdown
                    # timeout abandoned are no longer supervised (their leases run out).
                    if self._closing or not controls:
                        if self._closing or quiet >= LINGER_TICKS + IDLE_WAITS:
                            self._thread = None
                            return
                        self._idle = quiet >= LINGER_TICKS
                    self._wake.clear()
                if not controls:
                    if used_db and not db.is_closed():
                        # Peewee connections are per thread: this one was opened here
                        # for renewals; never keep it open while no job runs.
                        db.close()
                    used_db = False
                    quiet += 1
                    self._wake.wait(IDLE_WAIT if self._idle else SUPERVISOR_TICK)
                    continue
                quiet = 0
                wait = SUPERVISOR_TICK
                for control in controls:
                    wait = min(wait, self._tend(control, stop))
                    used_db = used_db or control.used_db
                try:
                    if self._chore():
                        used_db = True
                except Exception as exc:  # a database error: the loop meets it too
                    used_db = True
                    self._chore_failed(exc, controls)
                self._wake.wait(max(wait, 0.0))
        finally:
            if not db.is_closed():
                try:
                    db.close()
                except Exception:  # a broken connection: it is gone anyway
                    pass

    def _chore_failed(self, exc: BaseException, controls: List[JobControl]) -> None:
        self._drop_connection()
        if self.ride_out:
            logger.debug("supervisor: writing due acknowledgements failed (%s); the "
                         "worker retries", type(exc).__name__)
            return
        for control in controls:  # a worker fault: stop the jobs, report through one
            with control.busy:
                if control.error is None:
                    control.error = exc
                control.finished = True
                control.cancel(LEASE_LOST)

    def _drop_connection(self) -> None:
        db = self._queue.db
        if not db.in_transaction():
            try:
                db.close()
            except Exception:
                pass

    def _tend(self, control: JobControl, stop: Optional[threading.Event]) -> float:
        """One look at a job; returns how long to sleep before the next."""
        with control.busy:
            if control.finished or control.done:
                return SUPERVISOR_TICK
            if stop is not None and stop.is_set():
                control.finished = True
                control.cancel(CANCELLED)
                return SUPERVISOR_TICK
            remaining = (control.lease.expires_at - self._queue.clock()).total_seconds()
            if remaining <= 0:
                logger.warning("job %s: lease deadline passed; cancelling the handler",
                               control.lease.job_id)
                control.finished = True
                control.cancel(LEASE_LOST)
                return SUPERVISOR_TICK
            if control.next_renewal is not None and time.monotonic() >= control.next_renewal:
                control.used_db = True
                try:
                    renewed = self._renew(control)
                except Exception as exc:  # a database error
                    self._drop_connection()
                    if self.ride_out:
                        logger.debug("job %s: renewal failed (%s); retrying",
                                     control.lease.job_id, type(exc).__name__)
                        control.next_renewal = time.monotonic() + RENEWAL_RETRY
                        return min(remaining, SUPERVISOR_TICK)
                    control.error = exc
                    control.finished = True
                    control.cancel(LEASE_LOST)
                    return SUPERVISOR_TICK
                if not renewed:
                    control.finished = True
                    return SUPERVISOR_TICK
                control.next_renewal = (time.monotonic() + self._period
                                        if self._period is not None else None)
            wait = min(remaining, SUPERVISOR_TICK)
            if control.next_renewal is not None:
                wait = min(wait, max(control.next_renewal - time.monotonic(), 0.0))
            return wait

    def _renew(self, control: JobControl) -> bool:
        """One renewal; False when the handler was cancelled because it was refused."""
        current = control.lease
        renewed = self._queue.renew(current)
        if renewed is None:
            logger.warning("job %s: lease renewal refused (lost or at max_lease_lifetime); "
                           "cancelling the handler", current.job_id)
            control.cancel(LEASE_LOST)
            return False
        control.lease = renewed
        return True
