"""A worker logs when it takes over a job whose lease expired (#23, "the last failure of
a job says it was the last"): the sweep that makes expired leases claimable again says
so at WARNING, naming the queue and how many. On every database."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

from caravel_lite.testing import ManualClock
from tests.contract.jobs import QUEUE, Ping, dispatch, make_queue


def test_taking_over_expired_leases_is_logged_at_warning(db, caplog):
    clock = ManualClock(datetime(2031, 1, 1, tzinfo=timezone.utc))
    queue = make_queue(db, clock=clock, lease_duration=timedelta(seconds=5), max_attempts=3)
    for n in range(2):
        queue.enqueue(Ping(n), dispatch())
    assert len(queue.claim_many(QUEUE, 2)) == 2  # then the worker holding them stops
    clock.advance(timedelta(seconds=6))
    with caplog.at_level(logging.WARNING, logger="caravel_lite"):
        taken = queue.claim_many(QUEUE, 2)
    assert len(taken) == 2 and all(lease.attempt == 2 for lease in taken)
    lines = [r for r in caplog.records if r.levelno == logging.WARNING
             and "taken over" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert f"2 expired lease(s) on queue {QUEUE} taken over" in lines[0].getMessage()


def test_nothing_is_logged_when_no_lease_expired(db, caplog):
    clock = ManualClock(datetime(2031, 1, 1, tzinfo=timezone.utc))
    queue = make_queue(db, clock=clock)
    queue.enqueue(Ping(1), dispatch())
    with caplog.at_level(logging.WARNING, logger="caravel_lite"):
        assert queue.claim(QUEUE) is not None
    assert not [r for r in caplog.records if "taken over" in r.getMessage()]
