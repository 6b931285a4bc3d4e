"""Paused queues (migration 0009): one row per queue that no worker claims from.

Pausing changes nothing about the jobs: enqueue goes on, running jobs finish and are
acknowledged as usual (jobs a worker claimed ahead and has not started are handed
back), and a worker serving several queues keeps claiming from the others. A worker reads the paused set at most once a second (:data:`READ_INTERVAL`,
one small read per worker, never one per job or per claim), so it stops claiming from
a queue within about a second of the pause and, while any of its queues is paused,
wakes at least once a second, so it claims again within about a second of the resume
(2 s at most, on every database).
"""
from __future__ import annotations

import time
from typing import FrozenSet, Optional, Set

import peewee

from caravel_lite import validation
from caravel_lite.dialect import dialect_of
from caravel_lite.retry import retrying
from caravel_lite.schema import PAUSED_TABLE

__all__ = ["Pauses", "PausedCache", "READ_INTERVAL"]

READ_INTERVAL = 1.0


class Pauses:
    """The paused-queue statements of one database."""

    def __init__(self, db: peewee.Database) -> None:
        p = db.param
        self.db = db
        self._insert = f"INSERT INTO {PAUSED_TABLE} (queue, paused_at) VALUES ({p}, {p})"
        self._exists = f"SELECT 1 FROM {PAUSED_TABLE} WHERE queue = {p}"
        self._delete = f"DELETE FROM {PAUSED_TABLE} WHERE queue = {p}"
        self._all = f"SELECT queue FROM {PAUSED_TABLE}"

    def pause(self, queue_name: str, now_ms: int) -> bool:
        """Pause ``queue_name``: True if this call paused it, False if it already was.
        May be repeated (a lost reply: the repeat answers False, the queue is paused)."""
        validation.check_queue(queue_name, "queue_name")

        def insert() -> int:
            # Read first, so that the usual repeat raises no error (on PostgreSQL an
            # error inside a caller's transaction would end it).
            if self.db.execute_sql(self._exists, (queue_name,)).fetchone() is not None:
                return 0
            try:
                return int(self.db.execute_sql(self._insert, (queue_name, now_ms)).rowcount)
            except peewee.IntegrityError:  # paused by another call at the same moment
                return 0
        return retrying(dialect_of(self.db), self.db, insert) == 1

    def resume(self, queue_name: str) -> bool:
        """Resume ``queue_name``: True if it was paused. May be repeated."""
        validation.check_queue(queue_name, "queue_name")
        return retrying(dialect_of(self.db), self.db, lambda: int(
            self.db.execute_sql(self._delete, (queue_name,)).rowcount)) == 1

    def paused(self) -> Set[str]:
        """The names of the paused queues (exactly as stored)."""
        return {row[0] for row in self.db.execute_sql(self._all).fetchall()}


class PausedCache:
    """A worker's view of the paused set, read again once it is
    :data:`READ_INTERVAL` old (monotonic time). A failed read keeps the last known set
    and is tried again at the next look (claims meet a database that is away)."""

    def __init__(self, db: peewee.Database) -> None:
        self._pauses = Pauses(db)
        self._names: FrozenSet[str] = frozenset()
        self._read_at: Optional[float] = None

    @property
    def names(self) -> FrozenSet[str]:
        return self._names

    def refresh(self) -> bool:
        """Read the paused set if due; True when it changed."""
        now = time.monotonic()
        if self._read_at is not None and now - self._read_at < READ_INTERVAL:
            return False
        self._read_at = now
        try:
            names = frozenset(self._pauses.paused())
        except peewee.DatabaseError:
            return False
        changed, self._names = names != self._names, names
        return changed

    def is_paused(self, queue_name: str) -> bool:
        self.refresh()
        return queue_name in self._names
