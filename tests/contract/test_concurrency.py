"""Races between threads and between processes resolve to exactly one job, one lease,
one completion (SPEC §4 idempotency, §5 claim)."""
from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any, Callable, List

import pytest

from caravel_lite import JobState
from tests.contract import procs
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue, row_count

THREADS = 8
TIMEOUT = procs.TIMEOUT

# Every test here runs through the native claim and through the portable one
# (tests/contract/conftest.py).
pytestmark = pytest.mark.usefixtures("claim_path")


def _in_threads(count: int, action: Callable[[], Any]) -> List[Any]:
    barrier = threading.Barrier(count)
    results: List[Any] = []
    errors: List[BaseException] = []
    lock = threading.Lock()

    def run() -> None:
        try:
            barrier.wait(timeout=TIMEOUT)
            value = action()
            with lock:
                results.append(value)
        except BaseException as exc:  # reported to the test below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    assert not errors, errors
    return results


def test_same_key_from_threads_makes_one_job(db, connect):
    shared = connect()  # one Database object: Peewee keeps a connection per thread
    queue = make_queue(shared)
    results = _in_threads(THREADS, lambda: queue.enqueue(Ping(1), dispatch("shared-key")))
    shared.close()
    assert len({r.job_id for r in results}) == 1
    assert sorted(r.already_enqueued for r in results) == [False] + [True] * (THREADS - 1)
    assert row_count(db) == 1


def test_same_key_from_processes_makes_one_job(db, db_url):
    results = procs.in_processes(2, procs.enqueue_same_key, db_url)
    assert len({job_id for job_id, _ in results}) == 1
    assert sorted(flag for _, flag in results) == [False, True]
    assert row_count(db) == 1


def test_threads_claiming_one_job_get_one_lease(db, connect):
    job_id = make_queue(db).enqueue(Ping(1), dispatch()).job_id
    shared = connect()
    queue = make_queue(shared)
    leases = _in_threads(THREADS, lambda: queue.claim(QUEUE))
    shared.close()
    won = [lease for lease in leases if lease is not None]
    assert len(won) == 1 and won[0].job_id == job_id
    status = make_queue(db).status(job_id, QUEUE, TENANT)
    assert status.state == JobState.LEASED and status.attempts == 1


def test_processes_claiming_one_job_get_one_lease(db, db_url):
    job_id = make_queue(db).enqueue(Ping(1), dispatch()).job_id
    results = procs.in_processes(4, procs.claim_once, db_url)
    assert sorted(results, key=lambda r: r is not None) == [None, None, None, str(job_id)]
    assert make_queue(db).status(job_id, QUEUE, TENANT).attempts == 1


@pytest.mark.slow
def test_processes_drain_every_job_exactly_once(db, db_url):
    queue = make_queue(db)
    ids = {str(queue.enqueue(Ping(i), dispatch()).job_id) for i in range(60)}
    results = procs.in_processes(3, procs.drain, db_url)
    completed = Counter(job_id for done in results for job_id in done)
    assert set(completed) == ids
    assert max(completed.values()) == 1
    for job_id in ids:
        status = queue.status(uuid.UUID(job_id), QUEUE, TENANT)
        assert status.state == JobState.COMPLETED and status.attempts == 1
