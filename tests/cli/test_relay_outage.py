"""``caravel-lite relay --max-outage`` as a subprocess whose databases sit behind a TCP
proxy the test cuts (tests.cli.outage): a short outage is ridden out by the same
process, a longer one ends it with exit 1 and one line saying so (#12.5, #12.6); a
fault waiting cannot fix ends it at once, judged by the database that raised it (#22
defect 8)."""
from __future__ import annotations

import threading
import time

import peewee
import pytest

from caravel_lite import DatabaseQueue, Dispatch, OutboxRelay, QueueOutbox, migrate
from caravel_lite.dialect import open_database, with_database_name
from tests.cli import procs
from tests.cli.app import QUEUE, TENANT, Note, registry
from tests.cli.outage import rides_out_then_gives_up


def dispatched(db, staged) -> bool:
    rows = db.execute_sql("SELECT id FROM caravel_jobs").fetchall()
    return str(staged.outbox_id) in {row[0] for row in rows}


@pytest.mark.backends("postgres", "mysql")
def test_the_relay_rides_out_an_outage_then_gives_up_after_max_outage(db, db_url):
    outbox = QueueOutbox(db, registry)

    def stage(key: str):
        with db.atomic():
            return outbox.stage(Note(key), Dispatch(QUEUE, TENANT, key))

    def start(url: str):
        return procs.start("relay", "tests.cli.app:registry", "--app-database", url,
                           "--database", url, "--max-outage", "4", "--poll-interval", "0.2")

    rides_out_then_gives_up("relay", db_url, start, stage,
                            lambda staged: dispatched(db, staged))


@pytest.mark.backends("postgres")
def test_a_missing_outbox_database_ends_the_relay_at_once_whatever_the_queue_is(db_url,
                                                                               tmp_path):
    """Defect 8 of #22: with the outbox on PostgreSQL and the queue on SQLite, a missing
    outbox database was judged by SQLite's classifier, read as an outage, and the relay
    waited out the whole --max-outage. Each error is now judged by the database that
    raised it: a database that does not exist is not an outage."""
    queue_url = f"sqlite:///{tmp_path / 'queue.db'}"
    queue_db = open_database(queue_url)
    with queue_db.connection_context():
        migrate(queue_db)
    missing = with_database_name(db_url, "caravel_no_such_outbox_db")
    started = time.monotonic()
    result = procs.run("relay", "tests.cli.app:registry", "--app-database", missing,
                       "--database", queue_url, "--max-outage", "60",
                       "--poll-interval", "0.2", timeout=90)
    elapsed = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert elapsed < 30, f"the relay rode out a fault waiting cannot fix ({elapsed:.0f} s)"
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("caravel-lite relay: relay faulted"), result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.backends("postgres")
def test_the_relays_own_loop_judges_each_error_by_its_database(db_url, tmp_path):
    """The same through the Python API: OutboxRelay.run(max_outage=...) over a missing
    PostgreSQL outbox and a SQLite queue raises at once."""
    queue_db = open_database(f"sqlite:///{tmp_path / 'queue.db'}")
    with queue_db.connection_context():
        migrate(queue_db)
    outbox_db = open_database(with_database_name(db_url, "caravel_no_such_outbox_db"))
    relay = OutboxRelay(outbox_db, DatabaseQueue(queue_db, registry))
    stop = threading.Event()
    started = time.monotonic()
    with pytest.raises(peewee.OperationalError):
        relay.run(stop, poll_interval=0.2, max_outage=60)
    assert time.monotonic() - started < 10
