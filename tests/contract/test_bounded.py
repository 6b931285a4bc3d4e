"""``bounded(db, seconds)`` (#22 defect 4, the connection layer's half): a statement
blocked past the bound fails with StatementTimedOut, a dropped connection, within a
moment of the bound, even through a proxy that black-holes the traffic (the local end
acknowledges every byte, so no TCP timeout fires); the connection is closed and the
next statement, once the network is back, runs on a new one. (SQLite has no network:
a block there is bounded by busy_timeout and the retry budget, and only the argument
checks and a block within its bound are run on it.)"""
from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import peewee
import pytest

from caravel_lite import InvalidField, open_database
from caravel_lite.dialect import StatementTimedOut, bounded, dialect_of
from tests.contract.jobs import QUEUE, Ping, dispatch, make_queue
from tests.faults.lossy import DEFAULT_PORTS as PORTS
from tests.faults.lossy import LossyProxy, server_address


@pytest.mark.backends("postgres", "mysql")
def test_a_renewal_blocked_by_a_black_holed_network_fails_at_the_bound(db_url, backend, db):
    proxy = LossyProxy(server_address(db_url, PORTS[backend]))
    app_db = open_database(proxy.url(db_url))
    try:
        queue = make_queue(app_db, lease_duration=timedelta(seconds=30))
        queue.enqueue(Ping(1), dispatch())
        lease = queue.claim(QUEUE)
        assert lease is not None
        proxy.black_hole()
        started = time.monotonic()
        with pytest.raises(StatementTimedOut) as raised:
            with bounded(app_db, 0.5):
                queue.renew(lease)
        elapsed = time.monotonic() - started
        assert 0.5 <= elapsed < 2.0, elapsed
        assert dialect_of(db).is_disconnect(raised.value)
        assert isinstance(raised.value, peewee.OperationalError)
        assert app_db.is_closed()  # the shut-down connection is not reused
        proxy.restore()
        with bounded(app_db, 5):  # a new connection; within its bound, nothing fires
            renewed = queue.renew(lease)
        assert renewed is not None
        assert queue.complete(renewed)
    finally:
        proxy.restore()
        if not app_db.is_closed():
            app_db.close()
        proxy.close()


@pytest.mark.backends("postgres", "mysql")
@pytest.mark.parametrize("operation", ["renew", "complete"])
def test_a_recovery_blocked_at_the_bound_ends_the_call_at_the_bound(db_url, backend, db,
                                                                     operation):
    """The operation's reply is lost, then its read-back on a new connection is
    black-holed: the bound ends the call there, as it ends a first attempt, instead of
    each repeat of the read-back failing at once until the call's retry budget (2 s)
    ran out."""
    proxy = LossyProxy(server_address(db_url, PORTS[backend]))
    extra = {"prepare_threshold": None} if backend == "postgres" else {}
    app_db = open_database(proxy.url(db_url), **extra)
    try:
        queue = make_queue(app_db, lease_duration=timedelta(seconds=30))
        queue.enqueue(Ping(1), dispatch())
        lease = queue.claim(QUEUE)
        assert lease is not None
        marker = {"renew": b"renewals = renewals + 1",
                  "complete": b"SET state = 'completed'"}[operation]
        proxy.lose_reply_to(marker)
        proxy.black_hole_at(b"SELECT state, lease_token")  # the lost reply's read-back
        started = time.monotonic()
        with pytest.raises(StatementTimedOut):
            with bounded(app_db, 0.8):
                getattr(queue, operation)(lease)
        elapsed = time.monotonic() - started
        assert proxy.lost == [marker]
        assert 0.8 <= elapsed < 1.4, elapsed
        assert app_db.is_closed()
    finally:
        proxy.restore()
        if not app_db.is_closed():
            app_db.close()
        proxy.close()


@pytest.mark.backends("postgres", "mysql")
def test_an_outer_bound_shorter_than_an_inner_one_still_ends_the_statement(db_url, backend,
                                                                           db):
    """Blocks nest: a caller's bound of 0.5 s around a call that bounds its own
    statements at 3 s ends the blocked statement at 0.5 s (only the innermost bound
    was watched, and the statement ran to the inner one)."""
    proxy = LossyProxy(server_address(db_url, PORTS[backend]))
    app_db = open_database(proxy.url(db_url))
    try:
        assert app_db.execute_sql("SELECT 1").fetchone()[0] == 1
        proxy.black_hole()
        started = time.monotonic()
        with pytest.raises(StatementTimedOut):
            with bounded(app_db, 0.5):
                with bounded(app_db, 3):
                    app_db.execute_sql("SELECT 2")
        assert 0.5 <= time.monotonic() - started < 1.5
        assert app_db.is_closed()
    finally:
        proxy.restore()
        if not app_db.is_closed():
            app_db.close()
        proxy.close()


@pytest.mark.backends("postgres", "mysql")
def test_a_plain_peewee_database_is_bounded_too(db_url, backend, db):
    """A server database the application made itself (Peewee's own class, not
    open_database's): its cursor() shows the watchdog nothing, and a black-holed
    statement blocked for ever inside the block."""
    from urllib.parse import urlsplit

    proxy = LossyProxy(server_address(db_url, PORTS[backend]))
    parts = urlsplit(db_url)
    kind = peewee.PostgresqlDatabase if backend == "postgres" else peewee.MySQLDatabase
    plain = kind(parts.path.lstrip("/"), host="127.0.0.1", port=proxy.port,
                 user=parts.username)
    outcome: dict = {}

    def blocked() -> None:  # on a thread of its own: without the bound it never returns
        with bounded(plain, 5):  # opened here, when closed: the connection watched
            assert plain.execute_sql("SELECT 1").fetchone()[0] == 1
        proxy.black_hole()
        started = time.monotonic()
        try:
            with bounded(plain, 0.5):
                plain.execute_sql("SELECT 2")
        except Exception as exc:
            outcome["error"] = exc
        outcome["elapsed"] = time.monotonic() - started
        outcome["closed"] = plain.is_closed()

    thread = threading.Thread(target=blocked, daemon=True)
    try:
        thread.start()
        thread.join(5)
        assert not thread.is_alive(), "the statement is still blocked after 5 s"
        assert isinstance(outcome["error"], StatementTimedOut)
        assert 0.5 <= outcome["elapsed"] < 1.5
        assert outcome["closed"]
    finally:
        proxy.restore()
        thread.join(5)
        proxy.close()


@pytest.mark.backends("postgres", "mysql")
def test_a_statement_blocked_on_a_lock_fails_at_the_bound(db_url, backend, db):
    """No network fault: the server itself keeps the statement waiting (a row lock held
    by another connection)."""
    app_db = open_database(db_url)
    queue = make_queue(app_db)
    job = queue.enqueue(Ping(1), dispatch()).job_id
    lock = f"SELECT id FROM caravel_jobs WHERE id = {db.param} FOR UPDATE"
    try:
        with db.atomic():
            db.execute_sql(lock, (str(job),))
            started = time.monotonic()
            with pytest.raises(StatementTimedOut):
                with bounded(app_db, 0.5):
                    app_db.execute_sql(lock, (str(job),))
            assert time.monotonic() - started < 2.0
        assert app_db.is_closed()
        assert app_db.execute_sql("SELECT 1").fetchone()[0] == 1  # a fresh connection
    finally:
        if not app_db.is_closed():
            app_db.close()


def test_a_block_within_its_bound_changes_nothing(db):
    queue = make_queue(db)
    with bounded(db, 5):
        queue.enqueue(Ping(1), dispatch())
        assert queue.claim(QUEUE) is not None
    time.sleep(0)  # the watchdog was cancelled: nothing fires later
    assert not db.is_closed()
    assert db.execute_sql("SELECT 1").fetchone()[0] == 1


@pytest.mark.parametrize("seconds", [0, -1, float("nan"), float("inf"), True, "1"])
def test_bounded_refuses_a_bound_that_is_not_a_positive_number(db, seconds):
    with pytest.raises(InvalidField, match="seconds"):
        with bounded(db, seconds):
            pass


@pytest.mark.backends("postgres")
def test_postgresql_connections_have_a_tcp_user_timeout_and_keepalives(db_url):
    """What a real partition (packets dropped, nothing acknowledged) meets without a
    bound: the kernel gives up on unacknowledged data after tcp_user_timeout."""
    import socket

    app_db = open_database(db_url)
    try:
        conn = app_db.connection()
        sock = socket.socket(fileno=os.dup(conn.fileno()))
        try:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 30000
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
        finally:
            sock.close()
    finally:
        app_db.close()
    # The URL's own choice wins.
    chosen = open_database(db_url + "?tcp_user_timeout=5000&connect_timeout=3")
    assert int(chosen.connect_params["tcp_user_timeout"]) == 5000
    assert int(chosen.connect_params["connect_timeout"]) == 3


@pytest.mark.backends("mysql")
def test_mariadb_connections_have_a_tcp_user_timeout_and_keepalives(db_url):
    """PyMySQL takes no TCP options: the same as PostgreSQL's are set on its socket
    after each connect, so a real partition ends a blocked statement after 30 s
    instead of the kernel's retransmission limit (about 15 minutes), and an idle
    connection is probed after 30 s instead of 2 hours."""
    import socket

    def options(url: str):
        app_db = open_database(url)
        try:
            sock = socket.socket(fileno=os.dup(app_db.connection()._sock.fileno()))
            try:
                return (sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
                        sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
                        sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT))
            finally:
                sock.close()
        finally:
            app_db.close()

    assert options(db_url) == (30000, 1, 30, 10, 3)
    # The URL's own choice wins, and a new connection gets the options too.
    assert options(db_url + "?tcp_user_timeout=5000&keepalives_idle=7")[:3] == (5000, 1, 7)


@pytest.mark.backends("postgres", "mysql")
def test_past_the_bound_a_manual_commit_block_opens_no_connection(db_url, backend, db):
    """The BEGIN of a manual_commit() block replaces a dead connection (and opens a
    closed one), but not once the block's bound fired."""
    proxy = LossyProxy(server_address(db_url, PORTS[backend]))
    app_db = open_database(proxy.url(db_url))
    try:
        assert app_db.execute_sql("SELECT 1").fetchone()[0] == 1
        proxy.black_hole()
        with bounded(app_db, 0.3):
            with pytest.raises(StatementTimedOut):
                app_db.execute_sql("SELECT 2")
            assert app_db.is_closed()
            proxy.restore()
            with pytest.raises(StatementTimedOut):
                with app_db.manual_commit():
                    app_db.begin()
            assert app_db.is_closed()
    finally:
        proxy.restore()
        if not app_db.is_closed():
            app_db.close()
        proxy.close()
