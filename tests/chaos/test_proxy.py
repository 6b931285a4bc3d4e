"""The chaos proxy injects the faults it says it does (#22), against the real servers:
a dropped reply is lost after the server committed the statement, a reset connection
fails its next statement, a black hole holds traffic without closing anything, and a
refusal turns new connections away while open ones carry on. Plain Peewee databases
(no reconnecting) through the proxy, so that each fault reaches the test as is."""
from __future__ import annotations

import random
import time
from urllib.parse import urlsplit

import peewee
import pytest
from playhouse.db_url import connect

from tests.chaos.proxy import ChaosProxy
from tests.support import wait_for

pytestmark = pytest.mark.backends("postgres", "mysql")

PROBE = "chaos_probe"


@pytest.fixture
def proxied(db, db_url):
    parts = urlsplit(db_url)
    proxy = ChaosProxy((parts.hostname, parts.port)).start()
    db.execute_sql(f"DROP TABLE IF EXISTS {PROBE}")
    db.execute_sql(f"CREATE TABLE {PROBE} (n INTEGER PRIMARY KEY)")
    through = connect(proxy.through(db_url))
    try:
        yield proxy, through
    finally:
        if not through.is_closed():
            through.close()
        proxy.close()
        db.execute_sql(f"DROP TABLE {PROBE}")


def test_a_dropped_reply_is_lost_after_the_server_committed(proxied, db):
    proxy, through = proxied
    through.execute_sql("SELECT 1")  # past the connection's start-up
    proxy.drop_reply(match=f"INSERT INTO {PROBE}".encode(), label="probe")
    with pytest.raises((peewee.OperationalError, peewee.InterfaceError)):
        through.execute_sql(f"INSERT INTO {PROBE} (n) VALUES (1)")
    assert [tuple(row) for row in db.execute_sql(f"SELECT n FROM {PROBE}").fetchall()] == [(1,)]
    # The proxy counts the drop just after it reset the client, which may see the error
    # first.
    wait_for(lambda: proxy.counts["drop_reply"] == 1 and proxy.drops["probe"] == 1,
             timeout=5, message="the proxy to count the dropped reply")


def test_a_reset_connection_fails_its_next_statement(proxied):
    proxy, through = proxied
    through.execute_sql("SELECT 1")
    assert proxy.reset(random.Random(1), every=True) >= 1
    with pytest.raises((peewee.OperationalError, peewee.InterfaceError)):
        through.execute_sql("SELECT 1")
    assert proxy.counts["reset"] >= 1


def test_a_black_hole_holds_traffic_without_closing(proxied):
    proxy, through = proxied
    through.execute_sql("SELECT 1")
    proxy.blackhole(1.0)
    started = time.monotonic()
    assert through.execute_sql("SELECT 2").fetchone()[0] == 2  # the same connection
    assert time.monotonic() - started >= 0.9
    assert proxy.counts["blackhole"] == 1 and len(proxy.windows) == 1


def test_a_refusal_turns_new_connections_away_and_keeps_open_ones(proxied, db_url):
    proxy, through = proxied
    through.execute_sql("SELECT 1")
    proxy.refuse(1.0)
    other = connect(proxy.through(db_url))
    with pytest.raises((peewee.OperationalError, peewee.InterfaceError)):
        other.connect()
    assert through.execute_sql("SELECT 3").fetchone()[0] == 3
    wait_for(lambda: _connects(other), timeout=5, message="connections accepted again")
    assert time.time() >= proxy.windows[0].end
    assert other.execute_sql("SELECT 4").fetchone()[0] == 4
    other.close()


def _connects(database: peewee.Database) -> bool:
    try:
        database.connect()
    except (peewee.OperationalError, peewee.InterfaceError):
        return False
    return True
