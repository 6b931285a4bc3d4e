"""Raw ceiling on MariaDB: PyMySQL, SELECT ... FOR UPDATE SKIP LOCKED then UPDATE."""
from __future__ import annotations

from typing import Any, Optional

from bench.peers.raw_base import READY, TAKEN, RawPeer


class RawPyMySQLPeer(RawPeer):
    name = "raw PyMySQL"
    kinds = ("mysql",)
    requires = ("pymysql",)
    id_type = "BIGINT AUTO_INCREMENT PRIMARY KEY"

    def connect(self) -> Any:
        import pymysql

        t = self.target
        return pymysql.connect(host=t.host, port=t.port, user=t.user, database=t.name,
                               init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")

    def claim_id(self, cursor: Any) -> Optional[int]:
        # MariaDB has no UPDATE ... RETURNING: lock the row, mark it, commit.
        cursor.execute(f"SELECT id FROM raw_jobs WHERE state = {READY} ORDER BY id "
                       "LIMIT 1 FOR UPDATE SKIP LOCKED")
        row = cursor.fetchone()
        if row is not None:
            cursor.execute(f"UPDATE raw_jobs SET state = {TAKEN} WHERE id = %s", (row[0],))
        self.conn.commit()
        return row[0] if row else None
