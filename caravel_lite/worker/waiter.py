"""Waiting, at no cost, until a job of the worker's queues may be claimable.

One :class:`Waiter` serves one running worker, whatever its concurrency and however many
queues it serves. ``wait(wakeup, timeout)`` returns True as soon as a job of one of its
queues may be claimable, False when ``timeout`` passes with nothing due or when the
:class:`Wakeup` is raised (a stop request, a finished handler). Wake-ups are hints: the
worker still claims through the normal fenced path, so a spurious one costs one empty
claim and a lost one at most ``timeout`` of latency, never a job.

A wait never writes. Whatever the change signal says, the waiter first *reads* whether
anything of its queues is due (one indexed statement: :func:`_probe_sql`, or where it
polls :func:`_due_now_sql`) and only then lets the worker claim, so commits that brought
nothing due (another table, another queue, a job for later) cost the idle worker a read
and never a write statement. Each wait also reads when the next delayed job of its
queues falls due and when their earliest lease expires, and wakes then; a wait that
ends at its timeout reads whether anything is due, and that read also gives the next
wait, begun at once, its next due time (:data:`DUE_READ_KEPT`). Times come from the
queue's clock.

How the waiter hears of changes is the dialect's ``change_signal``:

- ``"notify"`` (PostgreSQL): triggers NOTIFY :data:`CHANNEL` with ``"<queue> <due ms>"``
  (migrations 0003 and 0004). The waiter LISTENs on a dedicated connection and blocks in
  ``select()`` on that socket and on the wake-up pipe: no polling at all while idle. If
  the listener cannot be opened or fails, it falls back to reading at the poll rates
  (:data:`POLL_PROBE`, :data:`IDLE_POLL_PROBE`) and reopens it every
  :data:`RECONNECT_DELAY` seconds.
- ``"data_version"`` (SQLite on a file): ``PRAGMA data_version`` on a connection of the
  waiter's own, read every :data:`PROBE_INTERVAL` seconds (every
  :data:`IDLE_PROBE_INTERVAL` once idle for :data:`ACTIVE_FOR`); it changes whenever another
  connection commits and reads shared memory, never the tables. A change triggers the
  due read.
- ``"poll"`` (MariaDB/MySQL): a cheap read of whether anything is due now (two EXISTS)
  every :data:`POLL_PROBE` seconds (:data:`IDLE_POLL_PROBE` once idle for
  :data:`ACTIVE_FOR`), as there is no change signal, so an idle worker still picks a
  new job up within about that long.

The fast rates hold for :data:`ACTIVE_FOR` seconds after the worker last found work (a
wait that found a due job, or a claim that leased jobs: :meth:`Waiter.found_work`), and
for the first :data:`STARTING_FOR` seconds of a new waiter (a job enqueued just after a
worker starts, as in a deploy or a test, is picked up at once); a worker that has
found none since then probes at the idle rates, as its first claim already took
whatever was waiting.
"""
from __future__ import annotations

import errno
import os
import select
import sqlite3
import threading
import time
from typing import Any, List, Optional, Sequence, Tuple, Union
from urllib.parse import quote

import peewee

from caravel_lite import validation
from caravel_lite.clock import now_micros
from caravel_lite.errors import InvalidField
from caravel_lite.observability import logger
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import JobState, Priority
from caravel_lite.worker.wakeup import Wakeup

__all__ = ["Wakeup", "Waiter", "PollWaiter", "DataVersionWaiter", "NotifyWaiter",
           "waiter_for", "CHANNEL"]

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

_PENDING = JobState.PENDING.value
_LEASED = JobState.LEASED.value


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
                f"(SELECT available_at FROM {t} WHERE queue = {p} AND state = '{_PENDING}' "
                f"AND priority = {int(priority)} AND available_at > {p} "
                f"AND attempts < max_attempts ORDER BY available_at LIMIT 1)")
        columns.append(f"(SELECT MIN(lease_expires_at) FROM {t} WHERE queue = {p} "
                       f"AND state = '{_LEASED}' AND lease_expires_at > {p})")
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
            logger.debug("waiter: next due time unreadable (%s)", type(exc).__name__)
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
            logger.debug("waiter: due read failed (%s)", type(exc).__name__)
            return on_error
        return earliest is not None and self._learn_due(earliest)


def _due_now_sql(p: str, queue_count: int) -> str:
    """Whether any job of the queues is claimable at a given instant, as cheaply as it
    can be asked (two EXISTS, two parameters per queue): the poll probe's statement.
    The pending one names every priority, so that it is a short range of the claim
    index (queue, state, priority, available_at) per queue and priority, whose first
    entry answers; with only (queue, state) to go on, the databases read every pending
    row of the queue, so each probe of a queue holding many delayed jobs read them all.
    Params: the names, now_ms, the names again, now_ms."""
    t = JOBS_TABLE
    names = ", ".join([p] * queue_count)
    priorities = ", ".join(str(int(priority)) for priority in Priority)
    return (f"SELECT EXISTS (SELECT 1 FROM {t} WHERE queue IN ({names}) "
            f"AND state = '{_PENDING}' AND priority IN ({priorities}) "
            f"AND available_at <= {p} AND attempts < max_attempts), "
            f"EXISTS (SELECT 1 FROM {t} WHERE queue IN ({names}) AND state = '{_LEASED}' "
            f"AND lease_expires_at <= {p})")


class PollWaiter(Waiter):
    """No change signal: every :data:`POLL_PROBE` seconds (:data:`IDLE_POLL_PROBE` when
    idle), one cheap read of whether anything of its queues is due now (a job that
    falls due is found within that long of its due time, so later due times need not
    be remembered between probes)."""

    def __init__(self, queue: Any, queue_names: Union[str, Sequence[str]]) -> None:
        super().__init__(queue, queue_names)
        self.due_now_sql = _due_now_sql(queue.db.param, len(self.queue_names))

    def _confirmed(self) -> bool:
        now_ms = now_micros(self.queue.clock) // 1000
        params = [*self.queue_names, now_ms, *self.queue_names, now_ms]
        self.reads += 1
        try:
            row = self.queue.db.execute_sql(self.due_now_sql, params).fetchone()
        except peewee.DatabaseError as exc:
            logger.debug("waiter: due probe failed (%s)", type(exc).__name__)
            return False  # the read at the timeout tries again and lets the claim see it
        return bool(row[0] or row[1])


class DataVersionWaiter(Waiter):
    """SQLite: a due read whenever ``PRAGMA data_version`` on its own connection
    changes, which happens whenever another connection commits to the database file."""

    signal = "data_version"

    def __init__(self, queue: Any, queue_names: Union[str, Sequence[str]]) -> None:
        super().__init__(queue, queue_names)
        self.probe_intervals = (PROBE_INTERVAL, IDLE_PROBE_INTERVAL)
        self._conn = None  # a sqlite3.Connection once open
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
        return int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _broken(self, exc: BaseException) -> None:
        logger.warning("waiter: PRAGMA data_version unavailable (%s); polling instead",
                       type(exc).__name__)
        self._close_connection()

    def _watch(self, wakeup: Wakeup, until: float) -> bool:
        if self._conn is None:
            self._open()
            if self._conn is None:
                return super()._watch(wakeup, until)
            return True  # changes while it was closed went unseen: read once
        while True:
            try:
                version = self._version()
            except sqlite3.Error as exc:
                self._broken(exc)
                return super()._watch(wakeup, until)
            if version != self._seen:
                self._seen = version
                return True
            remaining = until - time.monotonic()
            if remaining <= 0 or wakeup.wait(min(self._rate(self.probe_intervals),
                                                 remaining)):
                return False


class NotifyWaiter(Waiter):
    """PostgreSQL: LISTENs on :data:`CHANNEL` over a dedicated autocommit psycopg
    connection and blocks in ``select()`` on its socket and the wake-up pipe; wakes for
    a notification naming one of its queues whose due time has come, and remembers later
    due times. Reads at the poll rates while the listener is down."""

    signal = "notify"

    def __init__(self, queue: Any, queue_names: Union[str, Sequence[str]]) -> None:
        super().__init__(queue, queue_names)
        self.reconnect_delay = RECONNECT_DELAY
        self._conn: Any = None
        self._retry_at = 0.0
        self._heard = False  # the last _watch ended on a matching notification
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
        logger.warning("waiter: listener unavailable (%s); polling instead, retrying in "
                       "%.0f s", type(exc).__name__, self.reconnect_delay)
        self._close_connection()
        self._retry_at = time.monotonic() + self.reconnect_delay

    def _watch(self, wakeup: Wakeup, until: float) -> bool:
        self._heard = False
        if self._conn is None:
            if time.monotonic() >= self._retry_at and self._open():
                return True  # notifications sent while deaf are lost: read once
            return super()._watch(wakeup, until)
        pgconn = self._conn.pgconn
        while not wakeup.is_set():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return False
            try:
                readable, _, _ = select.select([pgconn.socket, wakeup.fileno()], [], [],
                                               remaining)
                if pgconn.socket not in readable:
                    continue  # the wake-up pipe, or the timeout: looked at above
                pgconn.consume_input()
                payloads = []
                while True:
                    notice = pgconn.notifies()
                    if notice is None:
                        break
                    payloads.append(notice.extra.decode("utf-8", "replace"))
                if pgconn.status != 0:  # CONNECTION_OK
                    raise OSError(errno.ECONNRESET, "listener connection lost")
            except Exception as exc:  # psycopg.Error, OSError, ValueError (closed fd)
                self._fail(exc)
                return False
            woken = learned = False
            for payload in payloads:
                queue_name, _, due = payload.partition(" ")
                if queue_name not in self.queue_names:
                    continue
                try:
                    due_ms = int(due)
                except ValueError:  # not our trigger's payload: read anyway
                    woken = True
                    continue
                if self._learn_due(due_ms):
                    woken = True
                else:
                    learned = True
            if woken:
                self._heard = True
                return True
            if learned:
                return False  # the caller recomputes how long to wait
        return False

    def _confirmed(self) -> bool:
        # A notification carries its queue and due time (checked in _watch): no read
        # needed. A reopened listener missed what was announced meanwhile: read.
        return self._heard or super()._confirmed()


_STRATEGIES = {"poll": PollWaiter, "data_version": DataVersionWaiter, "notify": NotifyWaiter}
_MEMORY = ("", ":memory:")


def waiter_for(queue: Any, queue_names: Union[str, Sequence[str]]) -> Waiter:
    """The best waiter the queue's database offers for ``queue_names``. Create it before
    the worker's first claim, so that nothing committed after that claim goes unseen;
    close it when the worker stops."""
    signal = queue.dialect.change_signal
    strategy = _STRATEGIES.get(signal)
    if strategy is None:
        raise ValueError(f"unknown change signal {signal!r}")
    if strategy is DataVersionWaiter and str(queue.db.database) in _MEMORY:
        # An in-memory database is private to its connection: no one else commits.
        strategy = PollWaiter
    return strategy(queue, queue_names)
