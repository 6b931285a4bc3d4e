"""Supervision of running jobs, in two threads so that a deadline never waits on the
database:

- the deadline keeper (:mod:`~caravel_lite.worker.deadlines`) tells a handler to stop
  (``ctx.cancelled``; an async handler's task is cancelled) when its lease deadline
  passes or ``stop`` is set. It does no database work at all, so a renewal stuck in a
  network partition cannot hold a deadline back;
- the renewer (:mod:`~caravel_lite.worker.renewals`) renews leases on schedule and
  writes acknowledgements that fall due while the worker's loop is busy, over one
  database connection of its own (opened while jobs run, closed when none does).

Both read one registry of the running jobs, :class:`Supervisor` (:meth:`~Supervisor.watch`
when a handler starts, :meth:`~Supervisor.release` when it returned). Each thread starts
with the first job and ends once idle (the next job starts it again). Lease deadlines
come from the queue's clock; the threads' own waits use real time.
"""
from __future__ import annotations

import threading
import time
import weakref
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from caravel_lite.observability import logger
from caravel_lite.progress import ProgressReport
from caravel_lite.values import JobContext, QueueLease

if TYPE_CHECKING:
    import asyncio  # annotations only: the worker imports it with its first async job

    from caravel_lite.queue import DatabaseQueue

# Reasons a job was told to stop (also the span outcomes of such jobs).
LEASE_LOST = "lease_lost"
CANCELLED = "cancelled"
TIMED_OUT = "timed_out"  # the job's timeout passed (caravel_lite.job_options)
# An operator cancelled the job (caravel_lite.cancel): it ends CANCELLED.
CANCEL_REQUESTED = "cancel_requested"

# Longest a supervising thread sleeps between looks at the clock and the stop event
# while jobs run: it bounds how late a shutdown or a deadline reaches a running handler,
# and lets a manually advanced test clock be noticed, at a few wake-ups per second.
SUPERVISOR_TICK = 0.1
# After the last job ends a thread keeps ticking this many times, so that the next job
# of a busy worker is picked up without waking it; then it waits for a wake-up...
LINGER_TICKS = 10
# ...and after this many idle seconds the thread ends (the next job starts a new one).
IDLE_WAITS = 5
IDLE_WAIT = 1.0
# How long closing waits for the renewer to end (it may be inside a renewal).
RENEWER_JOIN = 2.0


class JobControl:
    """What the handler's thread, the worker's loop and the supervising threads share
    for one job.

    ``reason`` is the first reason the job was told to stop (LEASE_LOST or CANCELLED);
    once it is set neither thread does anything more for the job. ``error`` is an
    exception the renewer hit (a worker fault unless the worker rides out outages).
    ``lease`` is replaced by the renewer only, under ``busy``.
    """

    # One is made for every job: slots make it smaller and its attributes cheaper to
    # set (and __weakref__ lets the job's context point back to it, see below).
    __slots__ = ("lease", "reason", "error", "done", "busy", "next_renewal", "timeout",
                 "timeout_at", "cancel_requested", "progress", "_lock", "_loop", "_task",
                 "__weakref__")

    def __init__(self, lease: QueueLease) -> None:
        self.lease = lease
        self.reason: Optional[str] = None
        self.error: Optional[BaseException] = None
        # Set once the handler returned (a flag: nothing ever waits on it).
        self.done = False
        # Held by the renewer while it renews this job: taken by release() so that a
        # renewal in flight has landed before the outcome is read.
        self.busy = threading.Lock()
        self.next_renewal: Optional[float] = None
        # The job's timeout, and the instant (queue clock) it ends, set when it starts.
        self.timeout: Optional[timedelta] = None
        self.timeout_at: Optional[datetime] = None
        # Set by the renewer when the job's cancel request was read (caravel_lite.cancel).
        self.cancel_requested = False
        # ctx.progress reports (caravel_lite.progress), written by the renewer; made on
        # the first report, so a job that reports none costs nothing more.
        self.progress: Optional[ProgressReport] = None
        # The handler's ctx.progress reaches this object through a weak reference: a
        # strong one would close a cycle (context -> control -> lease -> context) that
        # only the cycle collector frees, a dozen objects for every job (its locks,
        # event and lease), which cost a fast worker's drain about 5% of its rate.
        object.__setattr__(lease.context, "_progress", weakref.ref(self))
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._task: Optional[asyncio.Future[Any]] = None

    @property
    def ctx(self) -> JobContext:
        return self.lease.context

    def report(self, done: int, total: Optional[int]) -> None:
        """ctx.progress, from the handler's thread."""
        progress = self.progress
        if progress is None:
            with self._lock:
                if self.progress is None:
                    self.progress = ProgressReport()
                progress = self.progress
        progress.report(done, total)

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


class Ticker:
    """A supervising thread: started by the first watched job, ticking while jobs run,
    ended once idle or by :meth:`close`. Subclasses implement :meth:`tick`."""

    name = "caravel-ticker"

    def __init__(self, registry: "Supervisor") -> None:
        self._registry = registry
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._idle = False
        self._closing = False

    def poke(self, urgent: bool) -> None:
        """A job was watched (called under the registry's lock)."""
        self._closing = False
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
            self._thread.start()
        elif self._idle or urgent:
            self._wake.set()

    def close(self) -> Optional[threading.Thread]:
        """Ask the thread to end (called under the registry's lock); returns it."""
        self._closing = True
        self._wake.set()
        return self._thread

    @property
    def thread(self) -> Optional[threading.Thread]:
        return self._thread

    def _main(self) -> None:
        quiet = 0  # ticks (then idle waits) since the last job
        try:
            while True:
                with self._registry.lock:
                    controls, stop = self._registry.snapshot()
                    if self._closing or not controls:
                        if self._closing or quiet >= LINGER_TICKS + IDLE_WAITS:
                            self._thread = None
                            return
                        self._idle = quiet >= LINGER_TICKS
                    self._wake.clear()
                if not controls:
                    self.idle()
                    quiet += 1
                    self._wake.wait(IDLE_WAIT if self._idle else SUPERVISOR_TICK)
                    continue
                quiet = 0
                self._wake.wait(max(self.tick(controls, stop), 0.0))
        finally:
            self.ended()

    def tick(self, controls: List[JobControl], stop: Optional[threading.Event]) -> float:
        """One look at the running jobs; returns how long to sleep before the next."""
        raise NotImplementedError

    def idle(self) -> None:
        """No job runs (each idle tick)."""

    def ended(self) -> None:
        """The thread ends."""


class Supervisor:
    """The registry of one worker's running jobs, and its two supervising threads.

    ``queue`` renews leases and gives the clock. ``chore`` is called by the renewer on
    every tick while jobs run (the worker writes acknowledgements that are due); it
    returns True when it used the database. ``ride_out``: renewal and chore errors are
    retried later instead of cancelling the job (the worker rides out database
    outages); deadlines still cancel.
    """

    def __init__(self, queue: DatabaseQueue, chore: Callable[[], bool]) -> None:
        from caravel_lite.worker.deadlines import DeadlineKeeper
        from caravel_lite.worker.renewals import Renewer

        self.queue = queue
        self.lock = threading.Lock()
        self._controls: Dict[int, JobControl] = {}
        self._stop: Optional[threading.Event] = None
        interval = queue.options.lease_renewal_interval
        self.period = interval.total_seconds() if interval is not None else None
        self.deadlines = DeadlineKeeper(self)
        self.renewer = Renewer(self, chore)

    @property
    def ride_out(self) -> bool:
        return self.renewer.ride_out

    @ride_out.setter
    def ride_out(self, value: bool) -> None:
        self.renewer.ride_out = value

    def watch(self, control: JobControl, stop: Optional[threading.Event]) -> None:
        """Supervise ``control`` until :meth:`release`."""
        if self.period is not None:
            control.next_renewal = time.monotonic() + self.period
        now = self.queue.clock()
        if control.timeout is not None:
            control.timeout_at = now + control.timeout
        remaining = (control.lease.expires_at - now).total_seconds()
        if control.timeout_at is not None:
            remaining = min(remaining, (control.timeout_at - now).total_seconds())
        with self.lock:
            self._controls[id(control)] = control
            self._stop = stop
            # A ticking thread finds the job within a tick; wake it only when it sleeps
            # longer or the deadline is closer than that.
            self.deadlines.poke(remaining < 2 * SUPERVISOR_TICK)
            self.renewer.poke(False)

    def release(self, control: JobControl) -> None:
        """The handler returned and its outcome is decided: stop supervising
        ``control``. Never waits for a renewal in flight: one stuck on the database
        would hold the handler's thread (on the event loop, every async job with it)
        for as long as the database does. A renewal landing later only replaces
        ``control.lease`` with a longer lease of the same token, which the
        acknowledgement is fenced by either way; one still in flight leaves the
        acknowledgement the old, earlier deadline."""
        control.done = True
        with self.lock:
            self._controls.pop(id(control), None)

    def snapshot(self) -> Tuple[List[JobControl], Optional[threading.Event]]:
        """The jobs still running, and the stop event (called under :attr:`lock`)."""
        return [c for c in self._controls.values() if not c.done], self._stop

    def close(self) -> None:
        """End both threads (started again by the next :meth:`watch`) and forget the
        jobs still watched: those a shutdown timeout abandoned are no longer supervised
        (their leases run out)."""
        with self.lock:
            self._controls.clear()
            keeper, renewer = self.deadlines.close(), self.renewer.close()
        if keeper is not None and keeper is not threading.current_thread():
            keeper.join()
        if renewer is not None and renewer is not threading.current_thread():
            # A renewal stuck on the database does not hold the stop up: the thread
            # ends once its statement returns (or serves the next run, if one starts).
            renewer.join(RENEWER_JOIN)
            if renewer.is_alive():
                logger.warning("a lease renewal is still waiting on the database; the "
                               "worker stops without it")

    @property
    def running(self) -> bool:
        return self.deadlines.thread is not None or self.renewer.thread is not None
