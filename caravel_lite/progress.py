"""Job progress (migration 0009): ``ctx.progress(done, total=None)`` from a handler.

The handler's call only keeps the latest value in memory (no database work on its
thread). The worker's renewer writes it, at most once a second per job
(:data:`WRITE_INTERVAL`) and only when it changed since the last write, in one UPDATE
fenced by the job's lease (a job whose lease was lost is not written). A value
reported less than a second before the job ends may not be stored. Progress is
advisory: a failed write is dropped (the next change is written), never a reason to
stop the job.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Optional, Tuple

import peewee

from caravel_lite.clock import floor_ms, now_micros
from caravel_lite.errors import InvalidField
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import JobState, QueueLease

if TYPE_CHECKING:
    from caravel_lite.queue import DatabaseQueue

__all__ = ["ProgressReport", "check_progress", "write_progress", "WRITE_INTERVAL"]

WRITE_INTERVAL = 1.0
MAX_VALUE = 2 ** 62


def check_progress(done: object, total: object) -> Tuple[int, Optional[int]]:
    """``done`` and ``total`` as stored: whole numbers 0..2^62, ``total`` optional."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VALUE:
            raise InvalidField(name, f"must be a whole number from 0 to 2**62, got {value!r}")
    assert isinstance(done, int)
    return done, total if isinstance(total, int) else None


class ProgressReport:
    """The latest progress of one running job, handed from the handler's thread to
    the renewer's (which alone writes it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: Optional[Tuple[int, Optional[int]]] = None
        self._written: Optional[Tuple[int, Optional[int]]] = None
        self._written_at = float("-inf")

    def report(self, done: int, total: Optional[int]) -> None:
        with self._lock:
            self._latest = (done, total)

    def due(self) -> Optional[Tuple[int, Optional[int]]]:
        """The value to write now: changed, and a second after the last write."""
        with self._lock:
            if self._latest is None or self._latest == self._written:
                return None
            if time.monotonic() - self._written_at < WRITE_INTERVAL:
                return None
            self._written, self._written_at = self._latest, time.monotonic()
            return self._latest


def write_progress(queue: "DatabaseQueue", lease: QueueLease, done: int,
                   total: Optional[int]) -> bool:
    """Store a running job's progress, fenced by its lease; False if not owned."""
    db: peewee.Database = queue.db
    p = db.param
    now_ms = floor_ms(now_micros(queue.clock))
    sql = (f"UPDATE {JOBS_TABLE} SET progress_done = {p}, progress_total = {p}, "
           f"progress_at = {p} WHERE id = {p} AND state = '{JobState.LEASED.value}' "
           f"AND lease_token = {p} AND lease_expires_at > {p}")
    return int(db.execute_sql(sql, (done, total, now_ms, lease._id_text(), lease._token,
                                    now_ms)).rowcount) == 1
