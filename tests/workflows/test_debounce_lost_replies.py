"""A debounced enqueue whose reply is lost (issue #26): the library's recovery
recognises the call's own write, so one call never makes two runs, and a write that
never landed is still made.

The lost reply is injected at the driver's edge on every database: the transaction's
COMMIT is carried out (or, for "never landed", rolled back), what other connections do
before the client notices runs (a worker claims the holder, another caller rewrites
it), then the COMMIT raises as a dropped connection does. SQLite runs in process and
never loses a reply by itself, so its queue is told to read the injected error as a
lost connection; the recovery's statements are those of every database. On
PostgreSQL and MariaDB a proxy also loses the COMMIT's reply on the wire
(tests.faults.lossy)."""
from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator, List, Optional, Tuple

import peewee
import pytest

from caravel_lite import DatabaseQueue, codec
from caravel_lite.error_codes import ErrorCodes
from caravel_lite.testing import ManualClock
from tests.faults.lossy import LossyProxy, database_through_proxy
from tests.workflows.jobs import QUEUE, Step, count, make_queue, payload_of, to

WINDOW = timedelta(seconds=10)
T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
LATER = T0 + timedelta(seconds=1)
PAST_THE_WINDOW = LATER + WINDOW + timedelta(seconds=1)


def debounced(key: str = "user-7"):
    return to(debounce=WINDOW, debounce_key=key)


class ReplyLost(peewee.OperationalError):
    """What a dropped connection looks like to the library (the injected fault)."""


class LosingErrors(ErrorCodes):
    """The database's own classifier, which also reads :class:`ReplyLost` as a lost
    connection (SQLite's never has one)."""

    def __init__(self, inner: ErrorCodes) -> None:
        self.inner = inner
        self.drivers = inner.drivers

    def is_transient(self, exc: BaseException) -> bool:
        return self.inner.is_transient(exc)

    def is_disconnect(self, exc: BaseException) -> bool:
        return isinstance(exc, ReplyLost) or self.inner.is_disconnect(exc)


class CommitFault:
    """Loses the reply of ``db``'s next COMMIT: the COMMIT is carried out (``lands``)
    or rolled back instead, ``meanwhile()`` runs, then the COMMIT raises
    :class:`ReplyLost`; the rollback Peewee then tries finds nothing to roll back, as
    on a dropped connection. Later COMMITs (the recovery's) pass."""

    def __init__(self, db: peewee.Database) -> None:
        self.db = db
        self.original = db.commit
        self.original_rollback = db.rollback
        self.fired = 0
        self.ended = False
        db.commit = self._commit  # type: ignore[method-assign]
        db.rollback = self._rollback  # type: ignore[method-assign]

    def arm(self, lands: bool, meanwhile: Callable[[], None] = lambda: None) -> None:
        self.lands = lands
        self.meanwhile: Optional[Callable[[], None]] = meanwhile

    def _commit(self) -> None:
        meanwhile = getattr(self, "meanwhile", None)
        if meanwhile is None:
            return self.original()
        self.meanwhile = None
        if self.lands:
            self.original()
        else:
            self.original_rollback()
        self.ended = True
        self.fired += 1
        meanwhile()
        raise ReplyLost("the connection dropped before the COMMIT's reply")

    def _rollback(self) -> None:
        if self.ended:  # the transaction the lost COMMIT ended
            self.ended = False
            return
        self.original_rollback()


@pytest.fixture
def losing(db, connect):
    """(queue on ``db`` whose COMMIT replies can be lost, its clock, its fault, a
    second queue on another connection, past the window: a worker's)."""
    clock = ManualClock(T0)
    queue = make_queue(db, clock)
    queue.dialect = dataclasses.replace(queue.dialect,
                                        errors=LosingErrors(queue.dialect.errors))
    worker = make_queue(connect(), ManualClock(PAST_THE_WINDOW))
    return queue, clock, CommitFault(db), worker


def test_a_lost_rewrite_whose_holder_started_meanwhile_is_not_enqueued_again(losing, db):
    queue, clock, fault, worker = losing
    held = queue.enqueue(Step("a"), debounced())
    clock.set(LATER)
    leases: List[Any] = []
    fault.arm(lands=True, meanwhile=lambda: leases.append(worker.claim(QUEUE)))
    again = queue.enqueue(Step("b"), debounced())
    assert fault.fired == 1
    assert leases[0] is not None and leases[0].job_id == held.job_id
    assert payload_of(leases[0]) == Step("b")  # the rewrite landed: "b" runs there
    assert (again.job_id, again.already_enqueued) == (held.job_id, True)
    assert count(db) == 1  # and nowhere else


def test_a_lost_rewrite_that_never_landed_is_made(losing, db):
    queue, clock, fault, worker = losing
    held = queue.enqueue(Step("a"), debounced())
    clock.set(LATER)
    leases: List[Any] = []
    fault.arm(lands=False, meanwhile=lambda: leases.append(worker.claim(QUEUE)))
    again = queue.enqueue(Step("b"), debounced())
    assert fault.fired == 1
    assert payload_of(leases[0]) == Step("a")  # "b" never reached the holder...
    assert again.job_id != held.job_id and not again.already_enqueued
    assert count(db) == 2  # ...so it runs in a new one
    lease = worker.claim(QUEUE)
    assert lease is not None and lease.job_id == again.job_id
    assert payload_of(lease) == Step("b")


def test_a_lost_rewrite_overtaken_by_a_later_call_is_carried_by_the_holder(losing, db,
                                                                          connect):
    queue, clock, fault, worker = losing
    other = make_queue(connect(), ManualClock(LATER))
    held = queue.enqueue(Step("a"), debounced())
    clock.set(LATER)
    leases: List[Any] = []

    def overtaken() -> None:
        assert other.enqueue(Step("c"), debounced()).job_id == held.job_id
        leases.append(worker.claim(QUEUE))

    fault.arm(lands=True, meanwhile=overtaken)
    again = queue.enqueue(Step("b"), debounced())
    assert payload_of(leases[0]) == Step("c")  # the last call's payload runs
    assert (again.job_id, again.already_enqueued) == (held.job_id, True)
    assert count(db) == 1


@pytest.mark.parametrize("started", [False, True], ids=["pending", "started"])
def test_a_lost_insert_answers_its_own_new_job(losing, db, started):
    queue, clock, fault, worker = losing
    clock.set(LATER)
    leases: List[Any] = []
    fault.arm(lands=True,
              meanwhile=(lambda: leases.append(worker.claim(QUEUE))) if started
              else (lambda: None))
    first = queue.enqueue(Step("a"), debounced())
    assert fault.fired == 1
    assert not first.already_enqueued  # its own new job, not a duplicate
    assert count(db) == 1
    if started:
        assert leases[0].job_id == first.job_id
    else:
        clock.set(LATER + WINDOW)
        lease = queue.claim(QUEUE)
        assert lease is not None and lease.job_id == first.job_id


def test_a_lost_insert_that_never_landed_is_made(losing, db):
    queue, clock, fault, worker = losing
    fault.arm(lands=False)
    first = queue.enqueue(Step("a"), debounced())
    assert fault.fired == 1 and not first.already_enqueued
    assert count(db) == 1


def test_a_new_call_after_the_holder_started_is_a_new_run(losing, db):
    """The rule for a caller's own retry: a new call, as any other (debouncing promises a
    run after the last call; a holder that started ran before this one)."""
    queue, clock, fault, worker = losing
    held = queue.enqueue(Step("a"), debounced())
    lease = worker.claim(QUEUE)
    assert lease is not None and lease.job_id == held.job_id
    retried = queue.enqueue(Step("a"), debounced())
    assert retried.job_id != held.job_id and not retried.already_enqueued
    assert count(db) == 2


# -- on the wire (PostgreSQL, MariaDB) -----------------------------------------------------

@pytest.fixture
def lossy(db_url, backend) -> Iterator[Any]:
    # settle: how long the proxy holds the lost reply back; the worker claims meanwhile.
    with database_through_proxy(db_url, backend, settle=1.0) as opened:
        yield opened


def _claim_once_stored(db: peewee.Database, worker: DatabaseQueue, job: Step,
                      leases: List[Any]) -> threading.Thread:
    """A worker that claims as soon as a row holding ``job`` is committed, in a thread
    of its own, on connections of its own."""
    done = threading.Event()
    payload = codec.encode(job)

    def run() -> None:
        try:
            while not done.wait(0.01):
                row = db.execute_sql(
                    f"SELECT id FROM caravel_jobs WHERE payload = {db.param}",
                    (payload,)).fetchone()
                if row is not None:
                    leases.append(worker.claim(QUEUE))
                    return
        finally:
            db.close()
            worker.db.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.done = done  # type: ignore[attr-defined]
    return thread


def _enqueue_while_claiming(connect: Callable[[], peewee.Database], queue: DatabaseQueue,
                            job: Step) -> Tuple[Any, List[Any]]:
    """``queue.enqueue(job)`` (debounced) while a worker past the window claims the row
    that holds ``job`` once it is committed; the result and the worker's leases."""
    leases: List[Any] = []
    watcher = _claim_once_stored(connect(), make_queue(connect(),
                                                       ManualClock(PAST_THE_WINDOW)),
                                 job, leases)
    try:
        result = queue.enqueue(job, debounced())
    finally:
        watcher.done.set()  # type: ignore[attr-defined]
        watcher.join(10)
    return result, leases


@pytest.mark.backends("postgres", "mysql")  # SQLite has no wire to lose a reply on
@pytest.mark.parametrize("branch", ["rewrite", "insert"])
def test_on_the_wire_a_lost_commit_whose_job_started_is_not_enqueued_again(
        lossy, db, connect, branch):
    proxy, app_db = lossy
    clock = ManualClock(T0)
    queue = make_queue(app_db, clock)
    held = queue.enqueue(Step("a"), debounced()) if branch == "rewrite" else None
    clock.set(LATER)
    proxy.lose_reply_to(b"COMMIT")
    result, leases = _enqueue_while_claiming(connect, queue, Step("b"))
    assert proxy.lost == [b"COMMIT"]
    assert leases and leases[0] is not None and leases[0].job_id == result.job_id
    if held is not None:
        assert (result.job_id, result.already_enqueued) == (held.job_id, True)
    else:
        assert not result.already_enqueued
    assert count(db) == 1


@pytest.mark.backends("postgres", "mysql")
@pytest.mark.parametrize("branch", ["rewrite", "insert"])
def test_on_the_wire_a_commit_that_lands_after_the_recovery_began(lossy, db, branch):
    """The COMMIT reaches the server after the client's connection dropped: the
    recovery waits on the lost transaction's locks and then finds the call's write."""
    proxy, app_db = lossy
    clock = ManualClock(T0)
    queue = make_queue(app_db, clock)
    held = queue.enqueue(Step("a"), debounced()) if branch == "rewrite" else None
    clock.set(LATER)
    proxy.reset_then_forward(b"COMMIT", 0.5)
    result = queue.enqueue(Step("b"), debounced())
    assert proxy.lost == [b"COMMIT"]
    if held is not None:
        assert (result.job_id, result.already_enqueued) == (held.job_id, True)
    else:
        assert not result.already_enqueued
    assert count(db) == 1
    clock.set(LATER + WINDOW)
    lease = queue.claim(QUEUE)
    assert lease is not None and lease.job_id == result.job_id
    assert payload_of(lease) == Step("b")


def test_a_repeat_after_a_recovery_longer_than_the_window_is_not_run_with_the_old_payload(
        losing, db, connect):
    """The repeat of a rewrite whose reply was lost moves the holder's due time past
    the moment it writes, not past the moment the call began: a claim that read the
    holder before the repeat and leases it after re-checks ``available_at <= now``, and
    with the due time the call computed before its recovery (already past once the
    recovery took longer than the window) it would lease the holder with the payload
    it had read, "a", while the call was answered that "b" was in it. The claim here
    is a queue with flow control's (its jobs are read, then leased by a fenced UPDATE)
    on the caller's own clock."""
    queue, clock, fault, _ = losing
    worker = make_queue(connect(), clock, fair_tenants=True)
    held = queue.enqueue(Step("a"), debounced())
    clock.set(LATER)
    read, resume = threading.Event(), threading.Event()
    take = worker._groups.claimer._take

    def read_then_wait(*args: Any, **kwargs: Any) -> Any:
        read.set()  # the claim has read the holder, "a" in it, due since T0 + WINDOW
        assert resume.wait(30)
        return take(*args, **kwargs)

    worker._groups.claimer._take = read_then_wait  # type: ignore[method-assign]
    leases: List[Any] = []
    claiming = threading.Thread(target=lambda: leases.append(worker.claim(QUEUE)))

    def slow_recovery() -> None:
        clock.set(PAST_THE_WINDOW)  # the call's recovery outlasted the window
        claiming.start()
        assert read.wait(30)

    fault.arm(lands=False, meanwhile=slow_recovery)
    try:
        again = queue.enqueue(Step("b"), debounced())
    finally:
        resume.set()
        claiming.join(30)
    assert fault.fired == 1 and not claiming.is_alive()
    assert (again.job_id, again.already_enqueued) == (held.job_id, True)
    # "b" is in the holder and is what runs: the claim that read "a" took nothing
    assert leases == [None], [payload_of(lease) for lease in leases if lease is not None]
    clock.set(PAST_THE_WINDOW + WINDOW + timedelta(seconds=1))
    lease = worker.claim(QUEUE)
    assert lease is not None and lease.job_id == held.job_id
    assert payload_of(lease) == Step("b")
