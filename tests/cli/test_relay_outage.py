"""``caravel-lite relay --max-outage`` as a subprocess whose databases sit behind a TCP
proxy the test cuts (tests.cli.outage): a short outage is ridden out by the same
process, a longer one ends it with exit 1 and one line saying so (#12.5, #12.6)."""
from __future__ import annotations

import pytest

from caravel_lite import Dispatch, QueueOutbox
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
