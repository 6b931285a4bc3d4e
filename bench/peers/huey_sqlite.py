"""huey's own SQLite storage (SqliteHuey)."""
from __future__ import annotations

from typing import Any

from bench.peers.huey_base import HueyPeer


class SqliteHueyPeer(HueyPeer):
    name = "huey SqliteHuey"
    kinds = ("sqlite",)

    def make_huey(self) -> Any:
        from huey import SqliteHuey

        # fsync=True sets synchronous=FULL (2), False sets OFF (0); for NORMAL leave it
        # unset and apply the pragma ourselves.
        huey = SqliteHuey("bench", filename=self.target.path, journal_mode="wal",
                          fsync=True if self.target.synchronous == "FULL" else None)
        if self.target.synchronous == "NORMAL":
            huey.storage.conn.execute("PRAGMA synchronous = NORMAL")
        return huey
