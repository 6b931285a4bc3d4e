"""huey's peewee-based SqlHuey storage (huey.contrib.sql_huey) on any database."""
from __future__ import annotations

from typing import Any

from bench.peers.huey_base import HueyPeer


class SqlHueyPeer(HueyPeer):
    name = "huey SqlHuey"
    kinds = ("sqlite", "postgres", "mysql")
    requires = ("huey", "peewee")

    def make_huey(self) -> Any:
        import peewee
        from huey.contrib.sql_huey import SqlHuey
        from playhouse.db_url import connect

        if self.target.kind == "sqlite":
            db = peewee.SqliteDatabase(self.target.path, pragmas=self.target.sqlite_pragmas)
        else:
            db = connect(self.target.url)
        return SqlHuey("bench", database=db)
