"""The waiter's common part: the wait itself (wake-up, timeout, next due time) and the
due reads every strategy shares. See :mod:`caravel_lite.worker.waiter` for the whole."""
from __future__ import annotations

import time
from typing import Any, List, Optional, Sequence, Tuple, Union

import peewee

from caravel_lite import validation
from caravel_lite.clock import now_micros
from caravel_lite.errors import InvalidField
from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import JobState, Priority
from caravel_lite.worker.wakeup import Wakeup

__all__ = ["Waiter", "CHANNEL", "PROBE_INTERVAL", "IDLE_PROBE_INTERVAL", "POLL_PROBE",
           "IDLE_POLL_PROBE", "ACTIVE_FOR", "STARTING_FOR", "RECONNECT_DELAY",
           "DUE_MARGIN", "DUE_READ_KEPT", "PENDING", "LEASED"]

# The channel migrations 0003_notify_trigger and 0004_partial_indexes notify (frozen
# there as well).
CHANNEL = "caravel_jobs"
# Probing waiters look often while their worker is busy and seldom once it has been
# idle for a while: every wake-up of an idle process costs about 0.1 ms of CPU here
# (whatever it then does), so the rate, not the read, decides the idle cost.
# Seconds between two reads of PRAGMA data_version (bounds SQLite's pickup latency):
# within ACTIVE_FOR seconds of the last work found, and otherwise (also before any).
PROBE_INTERVAL = 0.02
IDLE_PROBE_INTERVAL = 0.1
# Seconds between two cheap due reads where there is no change signal (MariaDB/MySQL,
# or a listener that is down), likewise fast then idle: bounds the pickup latency there.
POLL_PROBE = 0.05
IDLE_POLL_PROBE = 0.25
# How long after the worker last found work (a wait that found a due job, a claim that
# leased some: Waiter.found_work) its waiter probes at the fast rate.
ACTIVE_FOR = 10.0
# How long a new waiter probes at the fast rate before it has found any work: about 20
# reads on MariaDB, where a fast first 10 s (ACTIVE_FOR) was most of an idle worker's
# CPU over its first 30 s (`python -m bench --databases mysql --scenarios idle`).
STARTING_FOR = 1.0
# Seconds between attempts to reopen a listener connection that failed.
RECONNECT_DELAY = 5.0
# A due time is acted on this long after it: the claim compares with whole
# milliseconds, so waking exactly on time could find the job not yet due.
DUE_MARGIN = 0.002
# A wait that begins within this many seconds of the previous wait's read at its
# timeout (which found nothing due) takes the next due time from that read instead of
# reading it again: an idle worker's waits follow each other at once, and what was
# committed in between the change signal (or, polling, the next probe) reports.
DUE_READ_KEPT = 0.05

PENDING = JobState.PENDING.value
LEASED = JobState.LEASED.value


def _probe_sql(p: str, queue_count: int) -> str:
    """One statement giving, per queue, the earliest due time of a claimable pending
    job (one ordered probe per priority, following the claim index) and the earliest
    lease expiry, each after a lower bound. Params per queue: (queue, after) five
    times."""
    t = JOBS_TABLE
    columns: List[str] = []
    for _ in range(queue_count):
        for priority in Priority:
            columns.append(
                f"(SELECT available_at FROM {t} WHERE queue = {p} AND state = '{PENDING}' "
                f"AND priority = {int(priority)} AND available_at > {p} "
                f"AND attempts < max_attempts ORDER BY available_at LIMIT 1)")
        columns.append(f"(SELECT MIN(lease_expires_at) FROM {t} WHERE queue = {p} "
                       f"AND state = '{LEASED}' AND lease_expires_at > {p})")
    return "SELECT " + ", ".join(columns)


class Waiter:
    """Waits for a sign that a job of its queues may be claimable.

    Subclasses implement :meth:`_watch`; this class adds the wake-up, the timeout, the
    due read and the next due time. Not thread-safe: one waiter serves one worker loop.
    Close it when the loop ends (also usable as a context manager).
    """

    #: the dialect capability this waiter implements
    signal = "poll"
    #: the connection of its own that a strategy may keep (closed by close())
    _conn: Any = None

    def __init__(self, queue: Any, queue_names: Union[str, Sequence[str]]) -> None:
        self.queue = queue
        names = [queue_names] if isinstance(queue_names, str) else list(queue_names)
        self.queue_names: Tuple[str, ...] = tuple(validation.check_queue(name)
                                                  for name in names)
        if not self.queue_names:
            raise InvalidField("queue_names", "must name at least one queue")
        self.probe_sql = _probe_sql(queue.db.param, len(self.queue_names))
        self.poll_probes = (POLL_PROBE, IDLE_POLL_PROBE)
        # When the worker last found work: never yet, so a new waiter starts at the idle
        # rate (the worker's first claim takes what was already waiting).
        self._active_at = time.monotonic() - ACTIVE_FOR + STARTING_FOR
        self._due_at: Optional[float] = None  # monotonic time of the next known due job
        self._timed_out_at: Optional[float] = None  # the last wait's timeout read, if empty
        self.reads = 0  # due reads made (tests count them)
        self.closed = False

    # -- the interface ---------------------------------------------------------------------

    def wait(self, wakeup: Wakeup, timeout: float) -> bool:
        """Block until a job of the queues may be claimable (True), or until ``timeout``
        seconds pass with nothing due or ``wakeup`` is raised (False). Never raises for
        a failing change signal (it then reads at the poll rates); a failing due read
        returns True, so that the worker's claim meets the fault."""
        if self.closed:
            raise RuntimeError("this waiter is closed")
        found = self._wait(wakeup, timeout)
        if found:
            self.found_work()
        return found

    def found_work(self) -> None:
        """The worker found work (a wait said so, or a claim leased jobs): probe at the
        fast rate for the next :data:`ACTIVE_FOR` seconds."""
        self._active_at = time.monotonic()

    def _rate(self, rates: Tuple[float, float]) -> float:
        """The fast probe interval while the worker recently had work, else the slow."""
        return rates[0] if time.monotonic() - self._active_at < ACTIVE_FOR else rates[1]

    def _wait(self, wakeup: Wakeup, timeout: float) -> bool:
        start = time.monotonic()
        end = start + max(float(timeout), 0.0)
        timed_out_at, self._timed_out_at = self._timed_out_at, None
        if timed_out_at is None or start - timed_out_at > DUE_READ_KEPT:
            self._due_at = self._next_due()
        # else _due_at is what the previous wait's timeout read found, just now
        while True:
            if wakeup.is_set():
                return False
            now = time.monotonic()
            if self._due_at is not None and now >= self._due_at:
                return True
            if now >= end:
                # The slow path's check (a missed signal), which also tells the next
                # wait, if it follows at once, when something falls due.
                self._due_at = None
                if self._due_now():
                    return True
                self._timed_out_at = time.monotonic()
                return False
            until = end if self._due_at is None else min(end, self._due_at)
            if self._watch(wakeup, until) and self._confirmed():
                return True

    def close(self) -> None:
        """Release what the waiter holds (its own connection). Idempotent."""
        self._close_connection()
        self.closed = True

    def _close_connection(self) -> None:
        # Strategies with a connection of their own keep it in ``_conn``.
        conn, self._conn = getattr(self, "_conn", None), None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection may fail; it is gone anyway
                pass

    def __enter__(self) -> "Waiter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- for subclasses ----------------------------------------------------------------------

    def _watch(self, wakeup: Wakeup, until: float) -> bool:
        """Wait until the monotonic time ``until`` for a change signal; True when one
        arrived (then the due read decides). May return False early (wake-up, or
        ``_due_at`` moved earlier). Without a signal: a due read every poll_probe."""
        probe = self._rate(self.poll_probes)
        wakeup.wait(max(min(until, time.monotonic() + probe) - time.monotonic(), 0.0))
        return not wakeup.is_set() and time.monotonic() < until

    def _confirmed(self) -> bool:
        """After a change signal: is something due now? (A due read by default; a
        failing one says no, and the read at the timeout tries again.)"""
        return self._due_now(on_error=False)

    def _learn_due(self, due_ms: int) -> bool:
        """Take note of a job due at ``due_ms`` (queue clock); True when already due."""
        delay = self._seconds_until(due_ms)
        if delay <= 0:
            return True
        due_at = time.monotonic() + delay
        if self._due_at is None or due_at < self._due_at:
            self._due_at = due_at
        return False

    # -- reading the table -------------------------------------------------------------------

    def _seconds_until(self, due_ms: int) -> float:
        return (due_ms * 1000 - now_micros(self.queue.clock)) / 1_000_000 + DUE_MARGIN

    def _earliest(self, after_ms: int) -> Optional[int]:
        """The earliest instant (ms) after ``after_ms`` at which a job of the queues is
        claimable (a pending job falls due, or a lease expires), or None."""
        params: List[Any] = []
        for name in self.queue_names:
            params += [name, after_ms] * (len(Priority) + 1)
        self.reads += 1
        row = self.queue.db.execute_sql(self.probe_sql, params).fetchone()
        times = [value for value in row if value is not None]
        return min(times) if times else None

    def _next_due(self) -> Optional[float]:
        """Monotonic time at which the next delayed job falls due or the earliest lease
        expires, or None. Only instants still in the future count: what is due now the
        claim just before saw (or another worker took). A failing read gives None: the
        due read at the timeout (or the worker's next claim) meets the fault."""
        try:
            earliest = self._earliest(now_micros(self.queue.clock) // 1000)
        except peewee.DatabaseError as exc:
            logger.debug("waiter: next due time unreadable (%s)", type(exc).__name__,
                         extra=fields(error_type=type(exc).__name__))
            return None
        if earliest is None:
            return None
        return time.monotonic() + max(self._seconds_until(earliest), 0.0)

    def _due_now(self, on_error: bool = True) -> bool:
        """Whether a job of the queues is claimable now (``on_error`` when the read
        fails: at the timeout, True, so that the worker's claim meets the fault);
        remembers a later due time."""
        try:
            earliest = self._earliest(-1)
        except peewee.DatabaseError as exc:
            logger.debug("waiter: due read failed (%s)", type(exc).__name__,
                         extra=fields(error_type=type(exc).__name__))
            return on_error
        return earliest is not None and self._learn_due(earliest)
