"""Raw ceiling on SQLite: the sqlite3 module, WAL, BEGIN IMMEDIATE for the claim."""
from __future__ import annotations

import sqlite3
from typing import Any, Optional

from bench.peers.raw_base import READY, TAKEN, RawPeer


class RawSqlitePeer(RawPeer):
    name = "raw sqlite3"
    kinds = ("sqlite",)
    param = "?"
    id_type = "INTEGER PRIMARY KEY"

    def connect(self) -> Any:
        conn = sqlite3.connect(self.target.path, timeout=5, isolation_level=None)
        for pragma, value in self.target.sqlite_pragmas.items():
            conn.execute(f"PRAGMA {pragma} = {value}")
        # Autocommit mode with explicit transactions: commit() after a single
        # statement is a no-op, the statement itself committed.
        return conn

    def claim_id(self, cursor: Any) -> Optional[int]:
        cursor.execute("BEGIN IMMEDIATE")
        row = cursor.execute(
            f"UPDATE raw_jobs SET state = {TAKEN} WHERE id = (SELECT id FROM raw_jobs "
            f"WHERE state = {READY} ORDER BY id LIMIT 1) RETURNING id").fetchone()
        cursor.execute("COMMIT")
        return row[0] if row else None

    def enqueue_bulk(self, n: int):
        self.cursor.execute("BEGIN IMMEDIATE")  # one transaction, not n
        return super().enqueue_bulk(n)
