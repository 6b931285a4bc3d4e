"""In-memory SQLite (issue #11 item 4): ``open_database("sqlite:///:memory:")`` is one
database shared by every thread of the Database object, so a worker whose supervisor
renews the lease on its own thread works; a plain ``SqliteDatabase(":memory:")``, one
database per connection, is refused when the queue is built, naming what to use."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

import peewee
import pytest

from caravel_lite import (DatabaseQueue, Dispatch, InvalidField, JobRegistry, JobState,
                          QueueOptions, QueueWorker, migrate, open_database)
from tests.support import wait_for

pytestmark = pytest.mark.backends("sqlite")


@dataclass(frozen=True)
class Slow:
    n: int


def _renewals(db: peewee.Database) -> int:
    return db.execute_sql("SELECT MAX(renewals) FROM caravel_jobs").fetchone()[0] or 0


def test_a_worker_renews_leases_on_a_shared_in_memory_database(backend):
    db = open_database("sqlite:///:memory:")
    migrate(db)
    db.close()  # the database outlives this thread's connection
    seen = {}

    def handle(job: Slow, ctx) -> None:
        # Runs while the supervisor renews on its own thread, over its own connection.
        seen["renewals"] = wait_for(lambda: _renewals(db), timeout=20,
                                    message="a renewal from the supervisor's thread")

    registry = JobRegistry()
    registry.register("memory.slow.v1", Slow, handle)
    queue = DatabaseQueue(db, registry, QueueOptions(
        lease_duration=timedelta(seconds=1),
        lease_renewal_interval=timedelta(milliseconds=200)))
    job_id = queue.enqueue(Slow(1), Dispatch(queue="memory", tenant_id="t")).job_id
    assert QueueWorker(queue).run_once("memory")
    assert seen["renewals"] >= 1
    status = queue.status(job_id, "memory", "t")
    assert (status.state, status.attempts) == (JobState.COMPLETED, 1)

    other_thread = {}
    thread = threading.Thread(target=lambda: other_thread.update(
        counts=queue.counts("memory").completed))
    thread.start()
    thread.join(10)
    assert other_thread["counts"] == 1  # any thread sees the same database
    db.close()


def test_two_in_memory_databases_are_two_databases(backend):
    first, second = open_database("sqlite:///:memory:"), open_database("sqlite:///:memory:")
    migrate(first)
    assert "caravel_jobs" in first.get_tables()
    assert "caravel_jobs" not in second.get_tables()


@pytest.mark.parametrize("name", [":memory:", "", "file::memory:", "file:x?mode=memory"])
def test_a_private_in_memory_database_is_refused_at_queue_construction(backend, name):
    with pytest.raises(InvalidField) as refused:
        DatabaseQueue(peewee.SqliteDatabase(name), JobRegistry())
    assert refused.value.field == "db"
    assert "open_database('sqlite:///:memory:')" in str(refused.value)
