"""``caravel-lite relay --max-outage`` as a subprocess whose databases sit behind a TCP
proxy the test cuts: a short outage is ridden out by the same process, a longer one
ends it with exit 1 and one line saying so (#12.5, #12.6)."""
from __future__ import annotations

import time
from urllib.parse import urlsplit

import pytest

from caravel_lite import Dispatch, QueueOutbox
from tests.cli import procs
from tests.cli.app import QUEUE, TENANT, Note, registry
from tests.cli.proxy import Proxy, through
from tests.support import wait_for


def dispatched(db, staged) -> bool:
    rows = db.execute_sql("SELECT id FROM caravel_jobs").fetchall()
    return str(staged.outbox_id) in {row[0] for row in rows}


@pytest.mark.backends("postgres", "mysql")
def test_the_relay_rides_out_an_outage_then_gives_up_after_max_outage(db, db_url):
    server = urlsplit(db_url)
    proxy = Proxy((server.hostname, server.port)).start()
    outbox = QueueOutbox(db, registry)
    url = through(proxy, db_url)

    def stage(key: str):
        with db.atomic():
            return outbox.stage(Note(key), Dispatch(QUEUE, TENANT, key))

    first = stage("before")
    process = procs.start("relay", "tests.cli.app:registry", "--app-database", url,
                          "--database", url, "--max-outage", "4", "--poll-interval", "0.2")
    try:
        wait_for(lambda: dispatched(db, first), timeout=30, message="the relay to dispatch")
        proxy.cut()                      # within the budget
        second = stage("during")
        time.sleep(1.0)
        assert process.poll() is None, "the relay gave up within its outage budget"
        proxy.start()
        wait_for(lambda: dispatched(db, second), timeout=40,
                 message="the same relay to carry on after the outage")
        proxy.cut()                      # longer than the budget
        code, _, err = procs.finish(process, timeout=60)
    finally:
        proxy.cut()
        if process.poll() is None:
            process.kill()
    assert code == 1, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(
        "caravel-lite relay: database unavailable for longer than --max-outage"), err
