"""An idle worker costs nothing (issue #12, item 7): commits that bring nothing due for
its queues (another table, another queue, a job for later) cause no write statement
from it, only reads; a due job is still picked up. Statements are counted, not timed."""
from __future__ import annotations

import threading
import time
from typing import List

from caravel_lite import JobRegistry, QueueWorker
from tests.support import wait_for
from tests.wakeup.helpers import OTHER_QUEUE, QUEUE, Ping, Started, enqueue, make_queue

WRITES = ("INSERT", "UPDATE", "DELETE", "BEGIN", "REPLACE", "WITH")


def _count_statements(db, seen: List[str]) -> None:
    """Record every statement the worker's database object runs."""
    original = db.execute_sql

    def execute_sql(sql, params=None, *args, **kwargs):
        seen.append(sql.lstrip().split(None, 1)[0].upper())
        return original(sql, params, *args, **kwargs)

    db.execute_sql = execute_sql


def test_unrelated_commits_cause_no_write_from_an_idle_worker(connect, db):
    db.execute_sql("CREATE TABLE app_events (id INTEGER PRIMARY KEY, note VARCHAR(20))")
    try:
        other = make_queue(connect())
        started = Started()
        registry = JobRegistry()
        registry.register("wakeup.ping.v1", Ping, started)
        worker_db = connect()
        statements: List[str] = []
        _count_statements(worker_db, statements)
        worker = QueueWorker(make_queue(worker_db, registry), poll_interval=0.2,
                             concurrency=4)
        stop = threading.Event()
        thread = threading.Thread(target=worker.run, args=([QUEUE, "wakeup-b"], stop),
                                  daemon=True)
        thread.start()
        wait_for(lambda: len(statements) >= 2, message="the first claim and read")
        time.sleep(0.3)
        before = len(statements)
        # 50 commits a second for two seconds: another table, another queue, later jobs.
        for n in range(100):
            if n % 10 == 0:
                enqueue(other, n, queue_name=OTHER_QUEUE)
            elif n % 10 == 5:
                enqueue(other, n, delay=3600)
            else:
                db.execute_sql(f"INSERT INTO app_events (id, note) VALUES ({n}, 'x')")
            time.sleep(0.02)
        idle = statements[before:]
        writes = [s for s in idle if s in WRITES]
        assert writes == [], writes
        assert idle  # it did look (reads)
        enqueue(other, 999)  # a due job of its queue: picked up
        assert started.event.wait(10)
        stop.set()
        thread.join(10)
        assert not thread.is_alive()
        worker_db.close()
    finally:
        db.execute_sql("DROP TABLE app_events")
