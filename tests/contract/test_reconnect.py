"""Databases opened by open_database reconnect after a dropped connection (issue #12
item 5, first bullet): killed from a second connection (PostgreSQL
``pg_terminate_backend``, MariaDB ``KILL CONNECTION``), the same Database object
enqueues again on its next statement; killed inside ``db.atomic()``, the error reaches
the caller and nothing of the transaction is kept. (SQLite has no connection to lose.)"""
from __future__ import annotations

import peewee
import pytest

from caravel_lite import open_database
from caravel_lite.dialect import reconnects
from tests.contract.jobs import Ping, dispatch, make_queue, row_count
from tests.support import wait_for

pytestmark = pytest.mark.backends("postgres", "mysql")

SESSION_ID = {"postgres": "SELECT pg_backend_pid()", "mysql": "SELECT CONNECTION_ID()"}
KILL = {"postgres": "SELECT pg_terminate_backend({})", "mysql": "KILL CONNECTION {}"}
ALIVE = {"postgres": "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = {}",
         "mysql": "SELECT COUNT(*) FROM information_schema.processlist WHERE id = {}"}


def _kill(backend: str, admin: peewee.Database, victim: peewee.Database) -> None:
    session = int(victim.execute_sql(SESSION_ID[backend]).fetchone()[0])
    admin.execute_sql(KILL[backend].format(session))
    wait_for(lambda: admin.execute_sql(ALIVE[backend].format(session)).fetchone()[0] == 0,
             message="the killed session to be gone")


def test_an_idle_killed_connection_is_replaced_on_the_next_statement(db, db_url, backend):
    app_db = open_database(db_url)
    queue = make_queue(app_db)
    queue.enqueue(Ping(1), dispatch())
    before = reconnects.value
    for round_ in range(2):  # and again after the first reconnect
        _kill(backend, db, app_db)
        queue.enqueue(Ping(2 + round_), dispatch())
    assert reconnects.value - before == 2
    assert row_count(db) == 3
    app_db.close()


def test_a_connection_killed_inside_a_transaction_reaches_the_caller(db, db_url, backend):
    app_db = open_database(db_url)
    queue = make_queue(app_db)
    queue.enqueue(Ping(1), dispatch())
    before = reconnects.value
    with pytest.raises((peewee.OperationalError, peewee.InterfaceError)):
        with app_db.atomic():
            queue.enqueue(Ping(2), dispatch())
            _kill(backend, db, app_db)
            queue.enqueue(Ping(3), dispatch())
    assert reconnects.value == before  # nothing was repeated behind the caller's back
    assert row_count(db) == 1  # the transaction's first job is gone with it
    queue.enqueue(Ping(4), dispatch())  # outside a transaction the next statement reconnects
    assert row_count(db) == 2
    assert reconnects.value - before == 1
    app_db.close()


def test_the_librarys_own_short_transaction_is_repeated_after_a_drop(db, db_url, backend):
    """enqueue_many outside the caller's transaction runs its own; a connection killed
    inside it rolls it back, and the call's recovery (#22) reads back the batch's own
    ids on a new connection, finds none, and writes the batch again under them."""
    app_db = open_database(db_url)
    queue = make_queue(app_db)
    queue.enqueue(Ping(1), dispatch())
    execute = app_db.execute_sql
    killed = []

    def execute_sql(sql, params=None):
        if app_db.in_transaction() and not killed:
            killed.append(sql)
            _kill(backend, db, app_db)
        return execute(sql, params)

    app_db.execute_sql = execute_sql
    results = queue.enqueue_many([(Ping(2), dispatch("keyed")), (Ping(3), dispatch())])
    assert killed, "the batch ran no statement inside its transaction"
    assert [r.already_enqueued for r in results] == [False, False]
    assert row_count(db) == 3
    app_db.close()


def _manual_enqueue(app_db: peewee.Database, queue, n: int) -> None:
    with app_db.manual_commit():
        app_db.begin()
        queue.enqueue(Ping(n), dispatch())
        app_db.commit()


def test_a_killed_connection_is_replaced_at_the_begin_of_a_manual_commit_block(db, db_url,
                                                                                backend):
    """``db.manual_commit()`` then ``db.begin()`` (how enqueue joins a caller's manual
    transaction): peewee counts the block as a transaction from its start, so a dead
    connection was never replaced there; every BEGIN failed, block after block."""
    app_db = open_database(db_url)
    queue = make_queue(app_db)
    _manual_enqueue(app_db, queue, 1)
    before = reconnects.value
    for round_ in range(2):
        _kill(backend, db, app_db)
        _manual_enqueue(app_db, queue, 2 + round_)
    assert reconnects.value - before == 2
    assert row_count(db) == 3
    app_db.close()


def test_a_manual_commit_block_on_a_closed_connection_keeps_its_transaction(db, db_url,
                                                                             backend):
    """The connection closed (as after a dropped one): the BEGIN that opens the next one
    keeps the manual block on peewee's transaction stack, so the enqueue inside joins
    the caller's transaction and the block ends cleanly (peewee's connect cleared the
    stack: the enqueue ran as if outside, and leaving the block raised IndexError)."""
    app_db = open_database(db_url)
    queue = make_queue(app_db)
    app_db.close()  # (reading MariaDB's version connected it)
    with app_db.manual_commit():
        app_db.begin()
        assert app_db.in_transaction()
        queue.enqueue(Ping(1), dispatch())
        app_db.rollback()
    assert not app_db.in_transaction()
    assert row_count(db) == 0  # it joined the transaction rolled back
    app_db.close()
