"""Celery with nothing but the database: kombu's SQLAlchemy transport as the broker
(``sqla+<url>``) and Celery's database result backend (``db+<url>``), both on the
case's fresh database (SQLite with the benchmark's durability, PostgreSQL through
psycopg 3, MariaDB through PyMySQL), and a worker with Celery's defaults except
``pool="solo"`` (one process, tasks run in its main thread, so a task can report
through bench.probe), started in the serving process as ``celery worker`` would be.

Only the workflow scenarios (issue 26): a chord (a group of no-op tasks with a
callback) and a chain. On this backend a chord is joined by the ``celery.chord_unlock``
task, which polls the group's results once a second until all are ready (only
key-value backends such as Redis join natively); the broker's idle poll is kombu's
``polling_interval`` of 1 s. Both are Celery's defaults, kept as a user gets them.
On MariaDB the chord cannot be sent at all (see ``enqueue_batch_stamped``).
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from bench import probe
from bench.peers.base import Peer

NOOP = "bench.noop"


def _sqlalchemy_url(target: Any) -> str:
    if target.kind == "sqlite":
        return f"sqlite:///{target.path}"
    if target.kind == "postgres":  # psycopg 3 (psycopg2 is not installed here)
        return f"postgresql+psycopg://{target.user}@{target.host}:{target.port}/{target.name}"
    return f"mysql+pymysql://{target.user}@{target.host}:{target.port}/{target.name}"


def _same_sqlite_durability(synchronous: str) -> None:
    """Every SQLite connection SQLAlchemy opens in this process gets the benchmark's
    durability (WAL, synchronous NORMAL or FULL, a busy timeout), as caravel_lite's
    do; neither kombu nor Celery has a setting for it."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def on_connect(connection: Any, _record: Any) -> None:
        if type(connection).__module__.startswith("sqlite3"):
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode = wal")
            cursor.execute(f"PRAGMA synchronous = {synchronous}")
            cursor.execute("PRAGMA busy_timeout = 5000")
            cursor.close()
    if not event.contains(Engine, "connect", on_connect):
        event.listen(Engine, "connect", on_connect)


class CeleryPeer(Peer):
    name = "Celery (SQLAlchemy broker, database backend)"
    kinds = ("sqlite", "postgres", "mysql")
    requires = ("celery", "sqlalchemy")
    scenarios = ("batch", "chain")

    def open(self) -> None:
        from celery import Celery

        if self.target.kind == "sqlite":
            _same_sqlite_durability(str(self.target.synchronous))
        url = _sqlalchemy_url(self.target)
        self.app = Celery("bench", broker="sqla+" + url, backend="db+" + url)
        self.app.conf.update(worker_hijack_root_logger=False)

        @self.app.task(name=NOOP)
        def noop(sent: float = 0.0) -> None:
            if sent:
                probe.hit(sent)
        self.noop = noop

    def close(self) -> None:
        self.app.close()

    def enqueue_stamped(self) -> None:
        self.noop.delay(time.time())

    def enqueue_batch_stamped(self, n: int, sent: float) -> None:
        from celery import chord
        from sqlalchemy.exc import DataError

        try:
            chord(self.noop.si() for _ in range(n))(self.noop.si(sent))
        except DataError as exc:
            if self.target.kind != "mysql":
                raise
            # The chord_unlock message lists every result id (about 56 KB of JSON for
            # 1,000, more once kombu base64-encodes it); kombu creates its payload
            # column as TEXT, 64 KiB on MySQL/MariaDB, and the INSERT fails (1406).
            raise RuntimeError(f"chord_unlock's message ({n:,} result ids) > "
                               "kombu_message.payload, TEXT (64 KiB)") from exc

    def enqueue_chain_stamped(self, n: int, sent: float) -> None:
        from celery import chain

        chain(*[self.noop.si() for _ in range(n - 1)], self.noop.si(sent)).apply_async()

    def serve(self, stop: Any) -> None:
        """``celery worker --pool=solo`` in this process until ``stop`` is set, then
        the warm shutdown Celery does on SIGTERM."""
        os.dup2(2, 1)  # its banner and shutdown line to stderr: stdout has the tables

        def stop_when_told() -> None:
            stop.wait()
            os.kill(os.getpid(), signal.SIGTERM)
        threading.Thread(target=stop_when_told, daemon=True).start()
        self.app.Worker(pool="solo", loglevel="WARNING", quiet=True).start()
