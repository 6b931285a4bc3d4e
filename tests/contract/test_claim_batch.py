"""claim_batch (issue #11 item 2): an empty answer says whether the queue was empty or
every race was lost, and where the database can skip locked rows (SQLite's single
writer, PostgreSQL and MariaDB 10.6+ with SKIP LOCKED) a claim never answers empty
while a job is free."""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Dict, List, Tuple

import pytest

from caravel_lite import ClaimBatch, QueueLease
from caravel_lite.dialect import ClaimMethod
from tests.contract import procs
from tests.contract.jobs import QUEUE, Ping, dispatch, make_queue, row_count

THREADS = 32
JOBS = 600


def test_claim_batch_answers_leases_and_whether_it_was_contended(db, claim_path):
    queue = make_queue(db)
    empty = queue.claim_batch(QUEUE, 5)
    assert empty == ClaimBatch((), False)
    ids = [queue.enqueue(Ping(i), dispatch()).job_id for i in range(3)]
    batch = queue.claim_batch(QUEUE, 5)
    assert isinstance(batch.leases, tuple) and not batch.contended
    assert [lease.job_id for lease in batch.leases] == ids
    assert all(isinstance(lease, QueueLease) and lease.attempt == 1 for lease in batch.leases)
    with pytest.raises(dataclasses.FrozenInstanceError):
        batch.contended = True  # type: ignore[misc]
    assert queue.claim_batch(QUEUE, 5) == ClaimBatch((), False)


@pytest.mark.parametrize("limit", [0, 1001, True, None])
def test_claim_batch_rejects_a_bad_limit_or_queue_name(db, limit):
    queue = make_queue(db)
    with pytest.raises(ValueError) as info:
        queue.claim_batch(QUEUE, limit)
    assert info.value.field == "limit"
    with pytest.raises(ValueError) as info:
        queue.claim_batch("Bad name", 1)
    assert info.value.field == "queue_name"


def test_a_portable_claim_that_loses_every_race_says_contended(db, connect, monkeypatch):
    """Another claimer takes the job between this claim's read and its UPDATE: the
    answer is empty but ``contended``, unlike an empty queue."""
    monkeypatch.setenv(procs.CLAIM_PATH_VARIABLE, "portable")
    procs.apply_claim_path(monkeypatch.setattr)
    queue = make_queue(db)
    job_id = queue.enqueue(Ping(1), dispatch()).job_id
    rival = make_queue(connect())
    claimer_db = connect()
    claimer = make_queue(claimer_db)
    raced: Dict[str, Any] = {}
    execute = claimer_db.execute_sql

    def execute_sql(sql: str, params: Any = None) -> Any:
        if sql.startswith("UPDATE") and "lease_token" in sql and "won" not in raced:
            raced["won"] = rival.claim(QUEUE)  # the rival commits first
        return execute(sql, params)

    claimer_db.execute_sql = execute_sql  # type: ignore[method-assign]
    assert claimer.dialect.claim_method is ClaimMethod.PORTABLE
    batch = claimer.claim_batch(QUEUE, 1)
    assert batch == ClaimBatch((), True)
    assert raced["won"].job_id == job_id
    assert claimer.claim_batch(QUEUE, 1) == ClaimBatch((), False)  # now really empty


def test_threads_claiming_never_see_a_false_empty(db, connect, claim_path):
    """32 threads over 600 due jobs. A false empty is an empty answer while a job was
    free: caught when the same thread claims a job afterwards (nothing is enqueued
    meanwhile, so only a job that was free all along can be found), or when more jobs
    are still pending than the other 31 threads could be holding in flight. On the
    native path (single writer or SKIP LOCKED) there are none; on the portable path
    every one of them is reported as ``contended``."""
    queue = make_queue(db)
    queue.enqueue_many([(Ping(i), dispatch()) for i in range(JOBS)])
    assert row_count(db) == JOBS
    shared = connect()  # one Database object: a connection per thread
    claimer = make_queue(shared)
    observer_db = connect()
    observer_lock = threading.Lock()
    claimed: List[Any] = []
    false_empties: List[Tuple[str, bool]] = []  # (how it was caught, contended)
    errors: List[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(THREADS)

    def pending() -> int:
        with observer_lock:
            return observer_db.execute_sql(
                "SELECT COUNT(*) FROM caravel_jobs WHERE state = 'pending'").fetchone()[0]

    def run() -> None:
        try:
            barrier.wait(procs.TIMEOUT)
            last_empty = None  # the previous answer, when it was empty
            while True:
                batch = claimer.claim_batch(QUEUE, 1)
                if batch.leases:
                    with lock:
                        claimed.append(batch.leases[0].job_id)
                        if last_empty is not None:
                            false_empties.append(("empty, then a lease", last_empty.contended))
                    last_empty = None
                    continue
                left = pending()
                with lock:
                    if left > THREADS - 1:
                        false_empties.append((f"empty with {left} pending", batch.contended))
                    if len(claimed) == JOBS:
                        return
                last_empty = batch
        except BaseException as exc:  # reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(procs.TIMEOUT)
    shared.close()
    observer_db.close()
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors[:3]
    assert len(claimed) == len(set(claimed)) == JOBS
    if claim_path == "native" and claimer.dialect.claim_method is not ClaimMethod.PORTABLE:
        assert false_empties == []
    else:
        assert [caught for caught, contended in false_empties if not contended] == []
