"""SQLite on a file: ``PRAGMA data_version`` as the change signal."""
from __future__ import annotations

import os
import sqlite3
import time
from typing import Any, Optional, Sequence, Union

from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.worker.waiting.base import IDLE_PROBE_INTERVAL, PROBE_INTERVAL, Waiter
from caravel_lite.worker.wakeup import Wakeup

__all__ = ["DataVersionWaiter"]


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
            # Imported here (once per connection the waiter opens), not at import:
            # urllib.parse brings ipaddress, a noticeable part of a worker's import.
            from urllib.parse import quote

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
                       type(exc).__name__, extra=fields(error_type=type(exc).__name__))
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
