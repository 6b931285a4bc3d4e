"""PostgreSQL's signal that a job finished (migration 0008's trigger), for
:meth:`caravel_lite.results.Results.wait`: LISTEN on a dedicated autocommit psycopg 3
connection, opened for one wait and closed after it. Only jobs that store options
(results kept, a timeout, a backoff of their own) are announced; for the others, or
without psycopg 3, or if the connection fails, the wait polls as elsewhere."""
from __future__ import annotations

import select
from typing import Any, Optional

import peewee

from caravel_lite.observability import logger
from caravel_lite.logfields import fields

__all__ = ["FinishedListener", "CHANNEL"]

# Frozen in migrations/0008_job_options_and_results.py as well.
CHANNEL = "caravel_jobs_finished"


class FinishedListener:
    """Announcements of finished jobs on one connection; :meth:`wait` returns when one
    names ``job_id`` (or any arrives, or the timeout passes)."""

    def __init__(self, db: peewee.Database) -> None:
        self._conn: Any = None
        try:
            import psycopg  # the optional driver the waiter uses as well
        except ImportError:
            return
        params = dict(db.connect_params)
        params.setdefault("connect_timeout", 5)
        params.setdefault("application_name", "caravel_lite result wait")
        conninfo = ""
        if str(db.database).startswith(("postgresql://", "postgres://")):
            conninfo = db.database
        else:
            params["dbname"] = db.database
        try:
            conn = psycopg.connect(conninfo, autocommit=True, **params)
            conn.execute(f"LISTEN {CHANNEL}")
        except (psycopg.Error, OSError) as exc:
            logger.debug("result wait: no listener (%s); polling", type(exc).__name__,
                         extra=fields(error_type=type(exc).__name__, component="result_wait"))
            return
        self._conn = conn

    @property
    def listening(self) -> bool:
        return self._conn is not None

    def wait(self, job_id: str, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when ``job_id`` was announced."""
        if self._conn is None:
            return False
        pgconn = self._conn.pgconn
        try:
            readable, _, _ = select.select([pgconn.socket], [], [], max(timeout, 0.0))
            if not readable:
                return False
            pgconn.consume_input()
            heard = False
            while True:
                notice = pgconn.notifies()
                if notice is None:
                    return heard
                heard = heard or notice.extra.decode("utf-8", "replace") == job_id
        except Exception as exc:  # psycopg.Error, OSError: poll from now on
            logger.debug("result wait: listener lost (%s); polling", type(exc).__name__,
                         extra=fields(error_type=type(exc).__name__, component="result_wait"))
            self.close()
            return False

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass


def open_listener(db: peewee.Database, enabled: bool) -> Optional[FinishedListener]:
    """A listener where the database announces finished jobs, else None."""
    if not enabled:
        return None
    listener = FinishedListener(db)
    return listener if listener.listening else None
