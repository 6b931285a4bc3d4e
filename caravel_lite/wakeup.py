"""Waking an idle worker soon after a job may have become claimable.

A :class:`Waiter` replaces the idle worker's plain sleep: ``wait(stop, timeout)``
returns True as soon as a job of its queue may be claimable, False when ``timeout``
passes or ``stop`` is set. Wake-ups are only hints. A worker still claims through the
normal fenced path and still claims again every ``poll_interval`` when nothing wakes
it, so a lost or spurious wake-up costs at most ``poll_interval`` of latency or one
empty claim, never a job.

How the waiter learns of changes is the dialect's ``change_signal``:

- ``"notify"`` (PostgreSQL): triggers NOTIFY :data:`CHANNEL` with
  ``"<queue> <available_at ms>"`` when rows become pending: an UPDATE once per row
  (migration 0003), an INSERT or COPY once per queue among its rows, with their
  earliest due time (migration 0004). The waiter LISTENs on a dedicated psycopg
  connection of its own (never the worker's); if that connection cannot be opened or
  fails, the waiter falls back to polling and tries again every
  :data:`RECONNECT_DELAY` seconds.
- ``"data_version"`` (SQLite on a file): ``PRAGMA data_version`` on a connection of
  the waiter's own, read every :data:`PROBE_INTERVAL` seconds, changes whenever
  another connection commits. It reads shared memory (WAL) or the file header, never
  the tables, so probing is cheap; any commit wakes the worker, which then claims.
- ``"poll"`` (MariaDB/MySQL, or a fallback): sleeps until the timeout.

Whatever the signal, each wait also reads (with two small indexed queries) when the
queue's next delayed job falls due and when its earliest lease expires, and wakes then,
so a job scheduled for later is picked up on time without being announced. Times come
from the queue's clock, the same one that stamped them.
"""
from __future__ import annotations

import os
import sqlite3
import threading
import time
from typing import Any, Optional
from urllib.parse import quote

import peewee
from peewee import fn

from caravel_lite import validation
from caravel_lite.clock import now_micros
from caravel_lite.observability import logger
from caravel_lite.schema import bind_models
from caravel_lite.values import JobState, Priority

__all__ = ["Waiter", "PollWaiter", "DataVersionWaiter", "NotifyWaiter", "waiter_for",
           "CHANNEL"]

# The channel migrations 0003_notify_trigger and 0004_partial_indexes notify (frozen
# there as well).
CHANNEL = "caravel_jobs"
# Seconds between two reads of PRAGMA data_version.
PROBE_INTERVAL = 0.004
# Longest a NOTIFY waiter listens before looking at ``stop`` again: bounds how late a
# stop request ends a wait (threading.Event cannot be selected on with a socket).
STOP_CHECK = 0.01
# Seconds between attempts to reopen a listener connection that failed.
RECONNECT_DELAY = 5.0
# A due time is acted on this long after it: the claim compares with whole
# milliseconds, so waking exactly on time could find the job not yet due.
DUE_MARGIN = 0.002

_PENDING = JobState.PENDING.value
_LEASED = JobState.LEASED.value


class Waiter:
    """Waits for a sign that a job of one queue may be claimable.

    Subclasses implement :meth:`_watch`; this class adds the stop request, the
    timeout and the queue's next due time. Not thread-safe: one waiter serves one
    worker loop. Close it when the loop ends (also usable as a context manager).
    """

    #: the dialect capability this waiter implements
    signal = "poll"

    def __init__(self, queue: Any, queue_name: str) -> None:
        self.queue = queue
        self.queue_name = validation.check_queue(queue_name)
        self._jobs, _ = bind_models(queue.db)
        self._due_at: Optional[float] = None  # monotonic time of the next known due job
        self.closed = False

    # -- the interface ---------------------------------------------------------------------

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        """Block until a job of the queue may be claimable (True), or until ``timeout``
        seconds pass or ``stop`` is set (False). Never raises for a failing change
        signal: it then sleeps like a plain poll."""
        if self.closed:
            raise RuntimeError("this waiter is closed")
        end = time.monotonic() + max(float(timeout), 0.0)
        self._due_at = self._next_due()
        while True:
            if stop.is_set():
                return False
            now = time.monotonic()
            if self._due_at is not None and now >= self._due_at:
                return True
            if now >= end:
                return False
            until = end if self._due_at is None else min(end, self._due_at)
            if self._watch(stop, until):
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

    def _watch(self, stop: threading.Event, until: float) -> bool:
        """Wait until the monotonic time ``until`` for a change signal; True when one
        arrived. May return False early (stop set, or ``_due_at`` moved earlier)."""
        stop.wait(max(until - time.monotonic(), 0.0))
        return False

    def _learn_due(self, due_ms: int) -> bool:
        """Take note of a job due at ``due_ms`` (queue clock); True when already due."""
        delay = self._seconds_until(due_ms)
        if delay <= 0:
            return True
        due_at = time.monotonic() + delay
        if self._due_at is None or due_at < self._due_at:
            self._due_at = due_at
        return False

    # -- the next due time ---------------------------------------------------------------------

    def _seconds_until(self, due_ms: int) -> float:
        return (due_ms * 1000 - now_micros(self.queue.clock)) / 1_000_000 + DUE_MARGIN

    def _next_due(self) -> Optional[float]:
        """Monotonic time at which the next delayed job of the queue falls due or its
        earliest lease expires (both become claimable then), or None. Only instants
        still in the future count: what is due now the claim just before saw (or
        another worker took). A failing read gives None: the worker's next claim will
        meet the same database and report it."""
        Job = self._jobs
        now_ms = now_micros(self.queue.clock) // 1000
        mine = Job.queue == self.queue_name
        # One ordered probe per priority follows the claim index (queue, state,
        # priority, available_at) instead of scanning every pending row.
        probes = [Job.select(Job.available_at)
                  .where(mine & (Job.state == _PENDING) & (Job.priority == int(priority))
                         & (Job.available_at > now_ms))
                  .order_by(Job.available_at).limit(1)
                  for priority in Priority]
        lease = (Job.select(fn.MIN(Job.lease_expires_at))
                 .where(mine & (Job.state == _LEASED) & (Job.lease_expires_at > now_ms)))
        try:
            row = peewee.Select(columns=[*probes, lease]).bind(self.queue.db).tuples().get()
        except peewee.DatabaseError as exc:
            logger.debug("waiter on queue %s: next due time unreadable (%s)",
                         self.queue_name, type(exc).__name__)
            return None
        times = [value for value in row if value is not None]
        if not times:
            return None
        return time.monotonic() + max(self._seconds_until(min(times)), 0.0)


class PollWaiter(Waiter):
    """No change signal: sleeps until the timeout, the next due time or ``stop``."""


class DataVersionWaiter(Waiter):
    """SQLite: wakes when ``PRAGMA data_version`` on its own connection changes, which
    happens whenever another connection commits to the database file."""

    signal = "data_version"

    def __init__(self, queue: Any, queue_name: str) -> None:
        super().__init__(queue, queue_name)
        self.probe_interval = PROBE_INTERVAL
        self._conn: Optional[sqlite3.Connection] = None
        self._seen: Optional[int] = None
        self._open()  # the baseline: every commit from now on is noticed

    def _open(self) -> None:
        db = self.queue.db
        params = dict(db.connect_params)
        params.pop("check_same_thread", None)
        params.pop("isolation_level", None)
        path = db.database
        if not params.get("uri"):
            # Read-write, never create: a waiter must not make a database file appear.
            path = "file:" + quote(os.path.abspath(path)) + "?mode=rw"
            params["uri"] = True
        try:
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                                         **params)
            self._seen = self._version()
        except sqlite3.Error as exc:
            self._broken(exc)

    def _version(self) -> int:
        assert self._conn is not None
        return self._conn.execute("PRAGMA data_version").fetchone()[0]

    def _broken(self, exc: BaseException) -> None:
        logger.warning("waiter on queue %s: PRAGMA data_version unavailable (%s); "
                       "polling instead", self.queue_name, type(exc).__name__)
        self._close_connection()

    def _watch(self, stop: threading.Event, until: float) -> bool:
        if self._conn is None:
            self._open()
            if self._conn is None:
                return super()._watch(stop, until)
            return True  # changes while it was closed went unseen: claim once
        while True:
            try:
                version = self._version()
            except sqlite3.Error as exc:
                self._broken(exc)
                return super()._watch(stop, until)
            if version != self._seen:
                self._seen = version
                return True
            remaining = until - time.monotonic()
            if remaining <= 0 or stop.wait(min(self.probe_interval, remaining)):
                return False


class NotifyWaiter(Waiter):
    """PostgreSQL: LISTENs on :data:`CHANNEL` over a dedicated autocommit psycopg
    connection; wakes for a notification naming its queue whose due time has come,
    and remembers later due times. Falls back to polling while the listener is down."""

    signal = "notify"

    def __init__(self, queue: Any, queue_name: str) -> None:
        super().__init__(queue, queue_name)
        self.reconnect_delay = RECONNECT_DELAY
        self.stop_check = STOP_CHECK
        self._conn: Any = None
        self._retry_at = 0.0
        self._open()  # LISTEN first: every job committed from now on is announced

    @property
    def listening(self) -> bool:
        return self._conn is not None

    def _open(self) -> bool:
        try:
            import psycopg  # an optional driver, like the database's own
        except ImportError as exc:
            self._fail(exc)
            self._retry_at = float("inf")  # installing it needs a restart anyway
            return False
        db = self.queue.db
        params = dict(db.connect_params)
        params.setdefault("connect_timeout", 5)
        params.setdefault("application_name", "caravel_lite waiter")
        conninfo = ""
        if str(db.database).startswith(("postgresql://", "postgres://")):
            conninfo = db.database
        else:
            params["dbname"] = db.database
        try:
            conn = psycopg.connect(conninfo, autocommit=True, **params)
            conn.execute(f"LISTEN {CHANNEL}")
        except (psycopg.Error, OSError) as exc:
            self._fail(exc)
            return False
        self._conn = conn
        return True

    def _fail(self, exc: BaseException) -> None:
        logger.warning("waiter on queue %s: listener unavailable (%s); polling instead, "
                       "retrying in %.0f s", self.queue_name, type(exc).__name__,
                       self.reconnect_delay)
        self._close_connection()
        self._retry_at = time.monotonic() + self.reconnect_delay

    def _watch(self, stop: threading.Event, until: float) -> bool:
        if self._conn is None:
            if time.monotonic() >= self._retry_at and self._open():
                return True  # notifications sent while deaf are lost: claim once
            # Sleep as a poll would, but no later than the next reconnection attempt.
            retry = max(self._retry_at, time.monotonic() + self.stop_check)
            return super()._watch(stop, min(until, retry))
        import psycopg

        while not stop.is_set():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            try:
                notices = list(self._conn.notifies(timeout=min(self.stop_check, remaining),
                                                   stop_after=1))
            except (psycopg.Error, OSError) as exc:
                self._fail(exc)
                return False
            woken = False
            learned = False
            for notice in notices:
                queue, _, due = notice.payload.partition(" ")
                if queue != self.queue_name:
                    continue
                try:
                    due_ms = int(due)
                except ValueError:  # not our trigger's payload: claim anyway
                    woken = True
                    continue
                if self._learn_due(due_ms):
                    woken = True
                else:
                    learned = True
            if woken:
                return True
            if learned:
                return False  # the caller recomputes how long to wait
        return False


_STRATEGIES = {"poll": PollWaiter, "data_version": DataVersionWaiter, "notify": NotifyWaiter}
_MEMORY = ("", ":memory:")


def waiter_for(queue: Any, queue_name: str) -> Waiter:
    """The best waiter the queue's database offers for ``queue_name``. Create it before
    the worker's first claim, so that nothing committed after that claim goes unseen;
    close it when the worker stops."""
    signal = queue.dialect.change_signal
    strategy = _STRATEGIES.get(signal)
    if strategy is None:
        raise ValueError(f"unknown change signal {signal!r}")
    if strategy is DataVersionWaiter and str(queue.db.database) in _MEMORY:
        # An in-memory database is private to its connection: no one else commits.
        strategy = PollWaiter
    return strategy(queue, queue_name)
