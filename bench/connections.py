"""How many database connections a set of processes holds, from the database's side
(PostgreSQL ``pg_stat_activity``, MariaDB's process list) or, for SQLite, from the
files the processes hold open."""
from __future__ import annotations

import os
from typing import Any, Sequence

from bench.targets import Target


class ConnectionCounter:
    """Counts the connections to ``target``'s database; :meth:`count` is quick enough
    to call every few milliseconds (one statement on an open admin connection)."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._conn: Any = None
        if target.kind == "postgres":
            import psycopg
            self._conn = psycopg.connect(host=target.host, port=target.port,
                                         user=target.user, dbname="postgres",
                                         autocommit=True)
        elif target.kind == "mysql":
            import pymysql
            self._conn = pymysql.connect(host=target.host, port=target.port,
                                         user=target.user, autocommit=True)

    def count(self, pids: Sequence[int] = ()) -> int:
        """Server databases: every session on the database (the admin session is on
        another one). SQLite: descriptors of ``pids`` open on the database file."""
        if self.target.kind == "postgres":
            return self._conn.execute("SELECT count(*) FROM pg_stat_activity "
                                      "WHERE datname = %s AND backend_type = 'client backend'",
                                      (self.target.name,)).fetchone()[0]
        if self.target.kind == "mysql":
            with self._conn.cursor() as cursor:
                cursor.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                               "WHERE DB = %s", (self.target.name,))
                return cursor.fetchone()[0]
        path = os.path.realpath(self.target.path or "")
        found = 0
        for pid in pids:
            fd_dir = f"/proc/{pid}/fd"
            try:
                names = os.listdir(fd_dir)
            except OSError:
                continue  # the process has exited
            for name in names:
                try:
                    if os.readlink(os.path.join(fd_dir, name)) == path:
                        found += 1
                except OSError:
                    continue
        return found

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
