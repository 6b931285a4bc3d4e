"""Supervision of the running job: its lease deadline, renewals and shutdown.

One long-lived thread per :class:`~caravel_lite.worker.QueueWorker` watches whichever
job the worker is running (starting a thread per job cost more than a no-op job). It
renews the lease on schedule and tells the handler to stop (``ctx.cancelled``; an async
handler's task is cancelled) when the deadline passes, a renewal is refused or fails,
or ``stop`` is set. Lease deadlines come from the queue's clock; the thread's own waits
use real time.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Callable, Optional

from caravel_lite.observability import logger
from caravel_lite.values import JobContext, QueueLease

# Reasons a job was told to stop (also the span outcomes of such jobs).
LEASE_LOST = "lease_lost"
CANCELLED = "cancelled"

# Longest the supervisor sleeps between looks at the clock and the stop event: it
# bounds how late a shutdown reaches a running handler, and lets a manually advanced
# test clock be noticed, at the cost of a few wake-ups per second while jobs run.
SUPERVISOR_TICK = 0.1
# After a job ends the thread keeps ticking this many times, so that the next job of a
# busy worker is picked up without waking it; then it waits for a wake-up...
LINGER_TICKS = 10
# ...and after this many idle seconds the thread ends (the next job starts a new one).
IDLE_WAITS = 5
IDLE_WAIT = 1.0


class JobControl:
    """What the worker thread and the supervisor share for one job.

    ``reason`` is the first reason the job was told to stop (LEASE_LOST or CANCELLED);
    once set, nothing is acknowledged. ``error`` is an exception the supervisor hit
    (renewing, or flushing acknowledgements), re-raised by the worker thread.
    """

    def __init__(self, lease: QueueLease) -> None:
        self.lease = lease
        self.reason: Optional[str] = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()
        # Held by the supervisor while it acts for this job: the worker takes it after
        # the handler so that a renewal in flight has landed before the outcome is read.
        self.busy = threading.Lock()
        self.next_renewal: Optional[float] = None
        self.finished = False   # the supervisor has nothing more to do for this job
        self.used_db = False
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._task: Optional[asyncio.Future] = None

    @property
    def ctx(self) -> JobContext:
        return self.lease.context

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            self.ctx.cancelled.set()
            self._cancel_task()

    def attach(self, loop: asyncio.AbstractEventLoop, task: asyncio.Future) -> None:
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

    ``queue`` renews leases and gives the clock. ``chore`` is called on every tick
    while a job runs (the worker flushes acknowledgements that are due); it returns
    True when it used the database, and its exceptions are worker faults.
    """

    def __init__(self, queue, chore: Callable[[], bool]) -> None:
        self._queue = queue
        self._chore = chore
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._control: Optional[JobControl] = None
        self._stop: Optional[threading.Event] = None
        self._thread: Optional[threading.Thread] = None
        self._idle = False
        self._closing = False
        interval = queue.options.lease_renewal_interval
        self._period = interval.total_seconds() if interval is not None else None

    # -- the worker thread's side ------------------------------------------------------

    def watch(self, control: JobControl, stop: Optional[threading.Event]) -> None:
        """Supervise ``control`` until :meth:`release`."""
        if self._period is not None:
            control.next_renewal = time.monotonic() + self._period
        remaining = (control.lease.expires_at - self._queue.clock()).total_seconds()
        with self._lock:
            self._control, self._stop, self._closing = control, stop, False
            if self._thread is None:
                self._thread = threading.Thread(target=self._main, name="caravel-supervisor",
                                                daemon=True)
                self._thread.start()
            elif self._idle or remaining < 2 * SUPERVISOR_TICK:
                # A lingering thread finds the job within a tick; wake it only when it
                # sleeps longer or the deadline is closer than that.
                self._wake.set()

    def release(self, control: JobControl) -> None:
        """The handler returned: stop supervising ``control`` once any renewal in
        flight has landed (so ``control.lease`` and ``control.reason`` are final)."""
        control.done.set()
        with control.busy:
            pass
        with self._lock:
            if self._control is control:
                self._control = None

    def close(self) -> None:
        """End the thread (it is started again by the next :meth:`watch`)."""
        with self._lock:
            self._closing = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    # -- the supervising thread ----------------------------------------------------------

    def _main(self) -> None:
        db = self._queue.db
        quiet = 0  # ticks (then idle waits) since the last job
        try:
            while True:
                with self._lock:
                    control, stop = self._control, self._stop
                    if control is not None and control.done.is_set():
                        control = None
                    if control is None:
                        if self._closing or quiet >= LINGER_TICKS + IDLE_WAITS:
                            self._thread = None
                            return
                        self._idle = quiet >= LINGER_TICKS
                        self._wake.clear()
                if control is None:
                    quiet += 1
                    self._wake.wait(IDLE_WAIT if self._idle else SUPERVISOR_TICK)
                    continue
                quiet = 0
                wait = self._tend(control, stop)
                control.done.wait(wait)
                if control.done.is_set() and control.used_db and not db.is_closed():
                    # Peewee connections are per thread: this one was opened here for
                    # this job's renewals; never keep it open between jobs.
                    db.close()
        finally:
            if not db.is_closed():
                db.close()

    def _tend(self, control: JobControl, stop: Optional[threading.Event]) -> float:
        """One look at the job; returns how long to sleep before the next."""
        with control.busy:
            if control.finished or control.done.is_set():
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
            try:
                if control.next_renewal is not None and time.monotonic() >= control.next_renewal:
                    control.used_db = True
                    if not self._renew(control):
                        control.finished = True
                        return SUPERVISOR_TICK
                    control.next_renewal = time.monotonic() + self._period
                if self._chore():
                    control.used_db = True
            except BaseException as exc:  # a database error: a worker fault
                control.error = exc
                control.finished = True
                control.cancel(LEASE_LOST)
                return SUPERVISOR_TICK
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
