"""Lost replies (issue #22, "operations are idempotent by themselves"): each operation of
the queue, its reply lost AFTER the server carried it out (a loopback proxy forwards
the statement, discards the server's whole answer and resets the client's connection:
tests.faults.lossy), recovers by reading back what it owns. Checked on PostgreSQL and
MariaDB: no orphaned lease, no attempt spent, ``already_enqueued`` right, nothing lost
or written twice. (SQLite runs in-process: it cannot lose a reply.)"""
from __future__ import annotations

from datetime import timedelta
from typing import Iterator, Tuple

import peewee
import pytest

from caravel_lite import Failure
from caravel_lite.testing import ManualClock
from caravel_lite.dialect import ClaimMethod
from tests.contract.jobs import QUEUE, Ping, dispatch, make_queue, row, row_count
from tests.faults.lossy import LossyProxy, database_through_proxy

pytestmark = pytest.mark.backends("postgres", "mysql")

LEASED_UPDATE = b"SET state = 'leased'"


@pytest.fixture
def lossy(db_url, backend) -> Iterator[Tuple[LossyProxy, peewee.Database]]:
    """A proxy to the test database's server and a database object opened through it
    (PostgreSQL: no prepared statements, so every statement's text is on the wire)."""
    with database_through_proxy(db_url, backend) as opened:
        yield opened


def _lost(proxy: LossyProxy, marker: bytes) -> None:
    assert not proxy.armed, "the marked statement was never sent"
    assert proxy.lost == [marker], "no reply was lost"


def _states(db) -> dict:
    return {r[0]: (r[1], r[2], r[3]) for r in db.execute_sql(
        "SELECT id, state, attempts, lease_token FROM caravel_jobs").fetchall()}


# -- enqueue -------------------------------------------------------------------------------

@pytest.mark.parametrize("key", [None, "k-1"], ids=["keyless", "keyed"])
def test_a_first_enqueue_whose_reply_is_lost_is_reported_as_new(lossy, db, key):
    """Defect 3: a key-less first enqueue was reported already_enqueued=True after the
    connection layer re-ran its INSERT."""
    proxy, app_db = lossy
    queue = make_queue(app_db)
    proxy.lose_reply_to(b"INSERT INTO caravel_jobs")
    result = queue.enqueue(Ping(1), dispatch(key))
    _lost(proxy, b"INSERT INTO caravel_jobs")
    assert result.already_enqueued is False
    assert row_count(db) == 1
    assert row(db, result.job_id)["state"] == "pending"


def test_enqueue_many_whose_commit_reply_is_lost_keeps_its_answer(lossy, db):
    proxy, app_db = lossy
    queue = make_queue(app_db)
    queue.enqueue(Ping(0), dispatch("old"))
    proxy.lose_reply_to(b"COMMIT")
    results = queue.enqueue_many([(Ping(1), dispatch()), (Ping(2), dispatch("new")),
                                  (Ping(0), dispatch("old")), (Ping(2), dispatch("new"))])
    _lost(proxy, b"COMMIT")
    assert [r.already_enqueued for r in results] == [False, False, True, True]
    assert results[3].job_id == results[1].job_id
    assert row_count(db) == 3  # the old job and two new ones, each once
    for result in results[:2]:
        assert row(db, result.job_id)["state"] == "pending"


def test_enqueue_many_whose_commit_reaches_the_server_after_the_read_back(lossy, db):
    """The race the read-back cannot close: the batch's COMMIT was still on its way
    when the connection dropped, so the read-back found none of its ids and the batch
    ran again; its repeat met the rows of the late commit (their ids are its own). The
    call answers what the committed batch did, as enqueue does, instead of raising
    IntegrityError for a batch it wrote (or reporting its own new jobs as duplicates)."""
    proxy, app_db = lossy
    queue = make_queue(app_db)
    queue.enqueue(Ping(0), dispatch("old"))
    proxy.reset_then_forward(b"COMMIT", 0.5)
    results = queue.enqueue_many([(Ping(1), dispatch()), (Ping(2), dispatch("new")),
                                  (Ping(0), dispatch("old")), (Ping(2), dispatch("new"))])
    assert proxy.lost == [b"COMMIT"]
    assert [r.already_enqueued for r in results] == [False, False, True, True]
    assert results[3].job_id == results[1].job_id
    assert row_count(db) == 3
    for result in results[:2]:
        assert row(db, result.job_id)["state"] == "pending"


@pytest.mark.parametrize("key", [None, "k-1"], ids=["keyless", "keyed"])
def test_an_enqueue_whose_insert_reaches_the_server_after_the_read_back(lossy, db, key):
    proxy, app_db = lossy
    queue = make_queue(app_db)
    proxy.reset_then_forward(b"INSERT INTO caravel_jobs", 0.5)
    result = queue.enqueue(Ping(1), dispatch(key))
    assert proxy.lost == [b"INSERT INTO caravel_jobs"]
    assert result.already_enqueued is False
    assert row_count(db) == 1


# -- claims --------------------------------------------------------------------------------

def _claim_marker(queue) -> bytes:
    # LOCKED_READ claims in a transaction: its COMMIT's reply is what a lost reply
    # after the server committed loses. The other paths' claim is one UPDATE.
    return b"COMMIT" if queue.dialect.claim_method is ClaimMethod.LOCKED_READ \
        else LEASED_UPDATE


@pytest.mark.parametrize("limit", [1, 3], ids=["claim", "claim_many"])
def test_a_claim_whose_reply_is_lost_returns_the_rows_it_took(lossy, db, claim_path, limit):
    """Defect 2: the re-run claim leased other rows and left the first claim's rows
    LEASED under a token nobody held, each with an attempt spent."""
    proxy, app_db = lossy
    queue = make_queue(app_db, max_attempts=1)
    ids = [queue.enqueue(Ping(n), dispatch()).job_id for n in range(6)]
    marker = _claim_marker(queue)
    proxy.lose_reply_to(marker)
    leases = queue.claim_many(QUEUE, limit)
    _lost(proxy, marker)
    assert [lease.job_id for lease in leases] == ids[:limit]  # the best ones, once
    states = _states(db)
    leased = {job_id for job_id, (state, _, _) in states.items() if state == "leased"}
    assert leased == {str(lease.job_id) for lease in leases}  # nothing orphaned
    for lease in leases:
        assert states[str(lease.job_id)] == ("leased", 1, lease._token)
        assert lease.attempt == 1
    assert all(states[str(i)] == ("pending", 0, None) for i in ids[limit:])  # no attempt spent
    # max_attempts=1: every claimed job still reaches its handler's outcome.
    assert queue.complete_many(leases) == [True] * limit
    assert {s for s, _, _ in _states(db).values()} == {"completed", "pending"}


# -- lease operations ----------------------------------------------------------------------

def _claimed(queue, n: int = 1):
    for i in range(n):
        queue.enqueue(Ping(i), dispatch())
    leases = queue.claim_many(QUEUE, n)
    assert len(leases) == n
    return leases


def test_complete_whose_reply_is_lost_answers_true(lossy, db):
    proxy, app_db = lossy
    queue = make_queue(app_db)
    (lease,) = _claimed(queue)
    proxy.lose_reply_to(b"SET state = 'completed'")
    assert queue.complete(lease) is True
    _lost(proxy, b"SET state = 'completed'")
    assert row(db, lease.job_id)["state"] == "completed"
    assert queue.complete(lease) is False  # a repeat changes nothing


def test_complete_many_whose_reply_is_lost_answers_each(lossy, db):
    proxy, app_db = lossy
    queue = make_queue(app_db)
    leases = _claimed(queue, 3)
    marker = b"COMMIT" if not queue.dialect.update_returning else b"SET state = 'completed'"
    proxy.lose_reply_to(marker)
    assert queue.complete_many(leases) == [True, True, True]
    _lost(proxy, marker)
    assert {r[0] for r in _states(db).values()} == {"completed"}


def test_fail_whose_reply_is_lost_is_recorded_once(lossy, db):
    proxy, app_db = lossy
    queue = make_queue(app_db, max_attempts=3)
    (lease,) = _claimed(queue)
    proxy.lose_reply_to(b"COMMIT")  # the failure and its history row: one transaction
    assert queue.fail(lease, Failure.HANDLER_FAILED, error=ValueError("x")) is True
    _lost(proxy, b"COMMIT")
    stored = row(db, lease.job_id)
    assert (stored["state"], stored["attempts"], stored["lease_token"]) == ("pending", 1, None)
    assert row_count(db, "caravel_failures") == 1
    assert queue.fail(lease, Failure.HANDLER_FAILED) is False


@pytest.mark.parametrize("operation", ["release", "snooze"])
def test_release_and_snooze_whose_reply_is_lost_give_the_attempt_back_once(lossy, db,
                                                                           operation):
    proxy, app_db = lossy
    queue = make_queue(app_db)
    (lease,) = _claimed(queue)
    proxy.lose_reply_to(b"attempts = attempts - 1")
    if operation == "release":
        assert queue.release(lease) is True
    else:
        assert queue.snooze(lease, timedelta(seconds=30)) is True
    _lost(proxy, b"attempts = attempts - 1")
    stored = row(db, lease.job_id)
    assert (stored["state"], stored["attempts"], stored["lease_token"]) == ("pending", 0, None)


def test_renew_whose_reply_is_lost_returns_the_renewed_lease(lossy, db):
    proxy, app_db = lossy
    queue = make_queue(app_db, lease_duration=timedelta(seconds=60))
    (lease,) = _claimed(queue)
    proxy.lose_reply_to(b"renewals = renewals + 1")
    renewed = queue.renew(lease)
    _lost(proxy, b"renewals = renewals + 1")
    assert renewed is not None and renewed.expires_at >= lease.expires_at
    stored = row(db, lease.job_id)
    assert stored["renewals"] == 1 and stored["lease_token"] == lease._token
    assert queue.complete(renewed) is True


@pytest.mark.parametrize("operation", ["complete", "fail", "release", "snooze"])
def test_a_stale_lease_whose_statement_never_ran_is_not_answered_by_another_write(
        lossy, db, operation):
    """The connection drops before the server ran the statement; in the same
    millisecond another write left the row as this call would have (the sweep made it
    pending again; the next holder completed it). The read-back must not take that row
    for this call's write: the lease is stale and the answer False."""
    proxy, app_db = lossy
    clock = ManualClock()
    queue = make_queue(app_db, clock, lease_duration=timedelta(seconds=30), max_attempts=3)
    job = queue.enqueue(Ping(1), dispatch()).job_id
    stale = queue.claim(QUEUE)
    assert stale is not None
    clock.advance(timedelta(seconds=31))
    assert queue.reclaim_expired(QUEUE) == 1  # pending again, at this millisecond
    if operation == "complete":
        taker = queue.claim(QUEUE)
        assert taker is not None and queue.complete(taker)
    marker = {"complete": b"SET state = 'completed'", "fail": b"last_failure = ",
              "release": b"attempts = attempts - 1",
              "snooze": b"attempts = attempts - 1"}[operation]
    proxy.reset_then_forward(marker, None)
    if operation == "fail":
        answer = queue.fail(stale, Failure.HANDLER_FAILED, error=ValueError("x"))
    elif operation == "snooze":
        answer = queue.snooze(stale, timedelta(seconds=5))
    else:
        answer = getattr(queue, operation)(stale)
    assert proxy.lost == [marker]
    assert answer is False
    stored = row(db, job)
    assert stored["state"] == ("completed" if operation == "complete" else "pending")
    assert row_count(db, "caravel_failures") == 0


def test_complete_many_of_stale_leases_is_not_answered_by_another_write(lossy, db):
    """complete_many's read-back after a lost reply, for leases taken over and
    completed by their next holders in the same millisecond."""
    proxy, app_db = lossy
    clock = ManualClock()
    queue = make_queue(app_db, clock, lease_duration=timedelta(seconds=30))
    for n in range(2):
        queue.enqueue(Ping(n), dispatch())
    stale = queue.claim_many(QUEUE, 2)
    clock.advance(timedelta(seconds=31))
    assert queue.reclaim_expired(QUEUE) == 2
    assert queue.complete_many(queue.claim_many(QUEUE, 2)) == [True, True]
    proxy.reset_then_forward(b"SET state = 'completed'", None)
    assert queue.complete_many(stale) == [False, False]
    assert proxy.lost == [b"SET state = 'completed'"]


def test_a_claim_whose_sweep_lost_its_reply_still_takes_the_job_it_freed(lossy, db,
                                                                        claim_path):
    """The claim's sweep of an expired lease loses its reply after the server made the
    job claimable; its repeat counts 0. The claim still takes the job (the RETURNING
    path took a count of 0 for 'nothing swept' and answered None)."""
    proxy, app_db = lossy
    clock = ManualClock()
    queue = make_queue(app_db, clock, lease_duration=timedelta(seconds=30))
    job = queue.enqueue(Ping(1), dispatch()).job_id
    assert queue.claim(QUEUE) is not None
    clock.advance(timedelta(seconds=31))
    marker = b"last_failure = 'lease_expired'"
    proxy.lose_reply_to(marker)
    lease = queue.claim(QUEUE)
    _lost(proxy, marker)
    assert lease is not None and lease.job_id == job and lease.attempt == 2
