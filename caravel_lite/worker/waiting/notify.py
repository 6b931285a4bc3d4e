"""PostgreSQL: LISTEN/NOTIFY as the change signal, on a dedicated psycopg 3 connection."""
from __future__ import annotations

import errno
import select
import time
from typing import Any, Sequence, Union

from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.worker.waiting.base import (CHANNEL, IDLE_POLL_PROBE, POLL_PROBE,
                                              RECONNECT_DELAY, Waiter)
from caravel_lite.worker.wakeup import Wakeup

__all__ = ["NotifyWaiter"]

# Whether this process already said that it polls for want of psycopg 3 (said once: a
# process that runs its worker again, or several, need not repeat it).
_said_no_psycopg = False


def _no_psycopg(exc: BaseException) -> None:
    global _said_no_psycopg
    if _said_no_psycopg:
        return
    _said_no_psycopg = True
    logger.warning("waiter: PostgreSQL's change signal (LISTEN) needs psycopg 3, which "
                   "is not installed (%s); this worker polls for new jobs instead (every "
                   "%.2f-%.2f s). Install it with: pip install 'caravel_lite[postgres]'",
                   type(exc).__name__, POLL_PROBE, IDLE_POLL_PROBE,
                   extra=fields(error_type=type(exc).__name__))


class NotifyWaiter(Waiter):
    """PostgreSQL: LISTENs on :data:`CHANNEL` over a dedicated autocommit psycopg
    connection and blocks in ``select()`` on its socket and the wake-up pipe; wakes for
    a notification naming one of its queues whose due time has come, and remembers later
    due times. Reads at the poll rates while the listener is down, and for good without
    psycopg 3 (said once per process, at WARNING)."""

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
        except ImportError as exc:  # e.g. Peewee on psycopg2 alone
            _no_psycopg(exc)
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
                       "%.0f s", type(exc).__name__, self.reconnect_delay,
                       extra=fields(error_type=type(exc).__name__))
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
