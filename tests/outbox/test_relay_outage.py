"""OutboxRelay.run(max_outage=...) rides out an outage as the worker does (every
database, both topologies): the intents are delivered once the queue database answers
again, one job each; the budget ends the run; without it errors propagate."""
from __future__ import annotations

import logging
import threading
import time
from typing import Any

import peewee
import pytest

from caravel_lite import DatabaseQueue, InvalidField, OutboxRelay
from tests.outbox.test_relay import dispatched, setup, stage
from tests.support import wait_for


class Flaky(DatabaseQueue):
    """enqueue_envelope fails like a lost database while ``down`` is set."""

    down = True
    failures = 0

    def enqueue_envelope(self, *args: Any, **kwargs: Any) -> Any:
        if self.down:
            self.failures += 1
            raise peewee.OperationalError("simulated outage")
        return super().enqueue_envelope(*args, **kwargs)


def _flaky_queue(s) -> Flaky:
    queue = Flaky(s.queue.db, s.queue.registry, clock=s.clock)
    return queue


def test_the_relay_rides_out_an_outage_and_delivers_once(dbs, caplog):
    s = setup(dbs)
    first, second = stage(s, 1, "inv-1"), stage(s, 2, "inv-2")
    queue = _flaky_queue(s)
    relay = OutboxRelay(dbs.app, queue, clock=s.clock)
    stop = threading.Event()
    errors: list = []
    caplog.set_level(logging.INFO, logger="caravel_lite")

    def loop() -> None:
        try:
            relay.run(stop, poll_interval=0.05, max_outage=30)
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            dbs.app.close()
            dbs.queue.close()

    thread = threading.Thread(target=loop)
    thread.start()
    try:
        # Longer than one call's retry budget: the pass fails and the relay rides it out.
        wait_for(lambda: any("database unavailable" in r.getMessage() for r in caplog.records),
                 timeout=20, message="a failed pass")
        wait_for(lambda: queue.failures >= 2, message="a second failed attempt")
        assert dispatched(dbs) == {}
        queue.down = False
        wait_for(lambda: len(dispatched(dbs)) == 2, timeout=20, message="both intents")
    finally:
        stop.set()
        thread.join(20)
    assert not thread.is_alive() and not errors
    assert sorted(dbs.jobs()) == sorted([str(first.outbox_id), str(second.outbox_id)])
    warnings = [r for r in caplog.records if "database unavailable" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_the_relay_gives_up_after_max_outage(dbs):
    s = setup(dbs)
    stage(s, 1, "inv-1")
    relay = OutboxRelay(dbs.app, _flaky_queue(s), clock=s.clock)
    started = time.monotonic()
    with pytest.raises(peewee.OperationalError):
        relay.run(threading.Event(), poll_interval=0.05, max_outage=1.0)
    assert 1.0 <= time.monotonic() - started < 15


def test_without_max_outage_the_relay_propagates_at_once(dbs):
    s = setup(dbs)
    stage(s, 1, "inv-1")
    relay = OutboxRelay(dbs.app, _flaky_queue(s), clock=s.clock)
    with pytest.raises(peewee.OperationalError):
        relay.run(threading.Event(), poll_interval=0.05)


def test_max_outage_is_validated(dbs):
    s = setup(dbs)
    with pytest.raises(InvalidField, match="max_outage"):
        s.relay.run(threading.Event(), max_outage=-1)
