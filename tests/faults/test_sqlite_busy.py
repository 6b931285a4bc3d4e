"""The library fix found by the contention scenario: SQLite statements that find the
database locked are repeated outside a transaction and otherwise raise an explained
DatabaseBusy (caravel_lite.dialect.BusyRetry). Fast, SQLite only."""
from __future__ import annotations

import threading

import peewee
import pytest

from caravel_lite import CaravelError, DatabaseQueue, Dispatch, QueueOptions, migrate
from caravel_lite.dialect import open_database, transient_retries
from caravel_lite.errors import DatabaseBusy
from tests.faults.jobs import Work, registry
from tests.support import wait_for


def _open(path, **extra):
    return open_database(f"sqlite:///{path}", pragmas={"journal_mode": "wal",
                                                       "busy_timeout": 5}, timeout=0.005,
                         **extra)


@pytest.fixture
def locked(tmp_path):
    path = tmp_path / "q.sqlite"
    setup = _open(path)
    with setup.connection_context():
        migrate(setup)
    holder = _open(path)
    holder.connect()
    holder.execute_sql("BEGIN IMMEDIATE")
    yield path, holder
    try:
        holder.execute_sql("ROLLBACK")
    except peewee.OperationalError:
        pass  # already rolled back by the test
    holder.close()


def test_locked_enqueue_retries_then_explains_and_writes_nothing(locked):
    path, holder = locked
    db = _open(path, busy_retries=3)
    queue = DatabaseQueue(db, registry, QueueOptions())
    before = transient_retries.value
    with pytest.raises(DatabaseBusy) as caught:
        queue.enqueue(Work(1), Dispatch(queue="faults", tenant_id="t"))
    assert isinstance(caught.value, CaravelError)
    assert isinstance(caught.value, peewee.OperationalError)
    assert "busy_timeout (5 ms)" in str(caught.value) and "may be repeated" in str(caught.value)
    assert transient_retries.value - before == 3
    holder.execute_sql("ROLLBACK")
    assert db.execute_sql("SELECT COUNT(*) FROM caravel_jobs").fetchone()[0] == 0
    db.close()


def test_lock_released_during_the_retries_lets_the_statement_through(locked):
    path, holder = locked
    holder.execute_sql("ROLLBACK")  # this test holds the lock from its own thread
    db = _open(path, busy_retries=50)
    queue = DatabaseQueue(db, registry, QueueOptions())
    before = transient_retries.value
    holding = threading.Event()

    def hold_then_release():
        other = _open(path)
        other.connect()
        other.execute_sql("BEGIN IMMEDIATE")
        holding.set()
        wait_for(lambda: transient_retries.value > before, timeout=10)
        other.execute_sql("ROLLBACK")
        other.close()
    thread = threading.Thread(target=hold_then_release)
    thread.start()
    try:
        holding.wait(10)
        result = queue.enqueue(Work(1), Dispatch(queue="faults", tenant_id="t"))
    finally:
        thread.join()
    assert transient_retries.value > before
    assert queue.status(result.job_id, queue="faults", tenant_id="t") is not None
    db.close()


def test_inside_a_transaction_it_is_not_repeated_and_says_so(locked):
    path, holder = locked
    db = _open(path)
    db.connect()
    before = transient_retries.value
    with pytest.raises(DatabaseBusy) as caught:
        with db.atomic():
            db.execute_sql("DELETE FROM caravel_jobs")
    assert "inside a transaction" in str(caught.value)
    assert transient_retries.value == before
    db.close()


def test_turned_off_it_raises_at_once(locked):
    path, _ = locked
    db = _open(path, busy_retries=0)
    before = transient_retries.value
    with pytest.raises(DatabaseBusy):
        db.execute_sql("DELETE FROM caravel_jobs")
    assert transient_retries.value == before
    db.close()
