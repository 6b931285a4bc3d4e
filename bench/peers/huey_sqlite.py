"""huey's own SQLite storage (SqliteHuey), with the same durability as caravel_lite."""
from __future__ import annotations

from typing import Any

from bench.peers.huey_base import HueyPeer


def _storage_class(synchronous: str) -> Any:
    from huey.storage import SqliteStorage

    class SameDurabilityStorage(SqliteStorage):
        # SqliteHuey sets synchronous only for fsync=True (FULL) or False (OFF) and
        # otherwise keeps SQLite's default (FULL in WAL mode): every connection it
        # opens gets the benchmark's setting instead, NORMAL or FULL as caravel_lite's.
        def _create_connection(self) -> Any:
            conn = super()._create_connection()
            conn.execute(f"PRAGMA synchronous = {synchronous}")
            return conn
    return SameDurabilityStorage


class SqliteHueyPeer(HueyPeer):
    name = "huey SqliteHuey"
    kinds = ("sqlite",)

    def make_huey(self) -> Any:
        from huey import SqliteHuey

        return SqliteHuey("bench", filename=self.target.path, journal_mode="wal",
                          storage_class=_storage_class(self.target.synchronous))
