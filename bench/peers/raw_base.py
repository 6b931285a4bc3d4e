"""The raw-driver ceiling: the least work a durable queue can do per job, no library.

A table of (id, state, payload, created); enqueue is one INSERT and one COMMIT; a
claim marks the oldest ready row taken and commits, completion marks it done and
commits (two commits per job, like any leased queue). Subclasses supply the
connection and the claim statement of their database.
"""
from __future__ import annotations

import time
from typing import Any, Optional

from bench import series
from bench.peers.base import Peer
from bench.timing import Sample, timed_once

READY, TAKEN, DONE = 0, 1, 2


class RawPeer(Peer):
    scenarios = ("enqueue", "bulk", "drain")  # no worker: only the first round's loops
    param = "%s"
    id_type = "BIGSERIAL PRIMARY KEY"

    def connect(self) -> Any:
        raise NotImplementedError

    def claim_id(self, cursor: Any) -> Optional[int]:
        """Take the oldest ready job and commit; its id, or None when empty."""
        raise NotImplementedError

    def open(self) -> None:
        self.conn = self.connect()
        self.cursor = self.conn.cursor()
        p = self.param
        self.insert_sql = f"INSERT INTO raw_jobs (state, payload, created) VALUES ({p}, {p}, {p})"
        self.done_sql = f"UPDATE raw_jobs SET state = {DONE} WHERE id = {p} AND state = {TAKEN}"

    def install(self) -> None:
        self.cursor.execute(f"CREATE TABLE raw_jobs (id {self.id_type}, state SMALLINT NOT NULL, "
                            "payload TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)")
        self.cursor.execute("CREATE INDEX raw_jobs_ready ON raw_jobs (state, id)")
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()

    def enqueue_one(self, i: int) -> None:
        self.cursor.execute(self.insert_sql, (READY, '{"n": %d}' % i, time.time()))
        self.conn.commit()

    def enqueue_bulk(self, n: int) -> Sample:
        rows = [(READY, '{"n": %d}' % i, time.time()) for i in range(n)]

        def insert_all() -> None:
            self.cursor.executemany(self.insert_sql, rows)
            self.conn.commit()
        return timed_once(insert_all, n)

    def claim_one(self) -> None:
        job = self.claim_id(self.cursor)
        if job is None:
            raise RuntimeError("raw: nothing claimed from a non-empty queue")
        self.cursor.execute(self.done_sql, (job,))
        self.conn.commit()

    def drain(self) -> int:
        done = 0
        while True:
            job = self.claim_id(self.cursor)
            if job is None:
                return done
            self.cursor.execute(self.done_sql, (job,))
            self.conn.commit()
            done += 1

    def add_history(self, n: int, budget: Optional[float] = None) -> int:
        self.cursor.execute(f"INSERT INTO raw_jobs (state, payload, created) "
                            f"SELECT {DONE}, '{{}}', n FROM {series.series(self.target.kind, n)}")
        self.conn.commit()
        return n
