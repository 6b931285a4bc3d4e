"""Raw ceiling on PostgreSQL: psycopg 3, one autocommit UPDATE ... SKIP LOCKED claim."""
from __future__ import annotations

from typing import Any, Optional

from bench.peers.raw_base import READY, TAKEN, RawPeer


class RawPsycopgPeer(RawPeer):
    name = "raw psycopg"
    kinds = ("postgres",)
    requires = ("psycopg",)

    def connect(self) -> Any:
        import psycopg

        t = self.target
        return psycopg.connect(host=t.host, port=t.port, user=t.user, dbname=t.name)

    def claim_id(self, cursor: Any) -> Optional[int]:
        cursor.execute(
            f"UPDATE raw_jobs SET state = {TAKEN} WHERE id = (SELECT id FROM raw_jobs "
            f"WHERE state = {READY} ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id")
        row = cursor.fetchone()
        self.conn.commit()
        return row[0] if row else None
