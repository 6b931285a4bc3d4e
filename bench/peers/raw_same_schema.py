"""The SQLite floor under caravel_lite's enqueue: the plain sqlite3 module writing the
row ``DatabaseQueue.enqueue`` writes, into caravel_lite's own schema (its migrations,
run on the same file), so that enqueue's ratio to it is the Python caravel_lite adds
on top of SQLite's own work.

One INSERT per call in autocommit mode, the statement its own transaction, as
caravel_lite's enqueue outside a transaction sends it: the same columns and the same
kind of values (a 36-character time-ordered UUID text id, the JSON text payload, the
queue and tenant, millisecond timestamps, NULL key and options); the same pragmas; the
same indexes updated (the table, keyed by id, and the pending-claim index).
"""
from __future__ import annotations

import random
import sqlite3
import time
import uuid
from typing import Any

from bench.peers.base import QUEUE, Peer
from bench.peers.caravel import TENANT, WIRE

COLUMNS = ("id", "queue", "tenant_id", "idempotency_key", "dedup_key", "wire_name",
           "payload", "priority", "available_at", "max_attempts", "state",
           "enqueued_at", "attempts", "renewals", "replay_count", "updated_at", "job_options")
INSERT = (f"INSERT INTO caravel_jobs ({', '.join(COLUMNS)}) "
          f"VALUES ({', '.join('?' * len(COLUMNS))})")
PRIORITY = 2      # caravel_lite's default priority (normal), as it stores it
MAX_ATTEMPTS = 3  # and its default max_attempts


class RawSameSchemaPeer(Peer):
    name = "raw sqlite3, caravel_lite's schema"
    kinds = ("sqlite",)
    requires = ("caravel_lite",)  # its migrations make the schema
    scenarios = ("enqueue",)

    def open(self) -> None:
        self.conn = sqlite3.connect(self.target.path, timeout=5, isolation_level=None)
        for pragma, value in self.target.sqlite_pragmas.items():
            self.conn.execute(f"PRAGMA {pragma} = {value}")
        self.cursor = self.conn.cursor()
        self._last_ms = 0
        self._counter = 0

    def install(self) -> None:
        import caravel_lite as cl

        db = cl.open_database(self.target.url,
                              pragmas=self.target.sqlite_pragmas)
        try:
            cl.migrate(db)
        finally:
            db.close()

    def close(self) -> None:
        self.conn.close()

    def _new_id(self) -> str:
        """A UUIDv7-layout id as caravel_lite makes them: the millisecond, a counter
        within it, random bits; so rows arrive in key order as caravel_lite's do."""
        ms = time.time_ns() // 1_000_000
        if ms <= self._last_ms:
            ms, self._counter = self._last_ms, self._counter + 1
            if self._counter > 0xFFF:  # as caravel_lite: borrow the next millisecond
                ms, self._counter = ms + 1, 0
        else:
            self._counter = 0
        self._last_ms = ms
        bits = ((ms << 80) | (0x7 << 76) | (self._counter << 64)
                | (0b10 << 62) | random.getrandbits(62))
        return str(uuid.UUID(int=bits))

    def enqueue_one(self, i: int) -> None:
        now_ms = time.time_ns() // 1_000_000
        params: Any = (self._new_id(), QUEUE, TENANT, None, None, WIRE,
                       '{"n":%d,"sent":0.0}' % i, PRIORITY, now_ms, MAX_ATTEMPTS, "pending",
                       now_ms, 0, 0, 0, now_ms, None)
        self.cursor.execute(INSERT, params)
