"""An interrupt that lands while the worker is writing (every database): a SIGTERM
handler calling sys.exit, or SIGINT's KeyboardInterrupt, raised in the worker's loop
while a batch of completions waits on a row lock. The batch is written by the exit
path once the lock goes, and the interrupt, not a database error, ends the run."""
from __future__ import annotations

import signal
import sys
import threading
from dataclasses import dataclass

import pytest

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, JobState, QueueWorker

from tests.worker.helpers import QUEUE, enqueue, options, status


@dataclass(frozen=True)
class Step:
    n: int


class RowLocker:
    """Holds a write lock on the jobs' rows (every row; SQLite: the database) from
    another connection, in a thread of its own, until told to let go."""

    def __init__(self, db, backend: str) -> None:
        self.db = db
        self.backend = backend
        self.held = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        db = self.db
        if self.backend == "sqlite":
            db.execute_sql("BEGIN IMMEDIATE")
        else:
            db.execute_sql("BEGIN")
            db.execute_sql("SELECT id FROM caravel_jobs FOR UPDATE").fetchall()
        self.held.set()
        self.release.wait(30)
        db.execute_sql("ROLLBACK")
        db.close()

    def hold(self) -> None:
        self.thread.start()
        assert self.held.wait(10)


@pytest.mark.parametrize("how", ["sigterm-exit", "sigint"])
def test_an_interrupt_during_a_stalled_completion_write_still_writes_it(
        db, connect, backend, how):
    registry = JobRegistry()
    locker = RowLocker(connect(), backend)
    main = threading.main_thread().ident
    assert threading.get_ident() == main  # signals reach the worker's loop thread
    signum = signal.SIGINT if how == "sigint" else signal.SIGTERM

    def interrupt_then_unlock() -> None:
        signal.pthread_kill(main, signum)  # type: ignore[arg-type]
        threading.Timer(0.5, locker.release.set).start()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        locker.hold()  # the completion's write, right after this returns, waits on it
        threading.Timer(0.5, interrupt_then_unlock).start()

    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(0))
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)))
    previous = signal.getsignal(signal.SIGTERM)
    if how == "sigterm-exit":  # the common application pattern
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    try:
        with pytest.raises(KeyboardInterrupt if how == "sigint" else SystemExit):
            worker.run(QUEUE)
    finally:
        signal.signal(signal.SIGTERM, previous)
        locker.release.set()
    found = status(queue, job_id)  # returned before the interrupt: completed
    assert (found.state, found.attempts) == (JobState.COMPLETED, 1)


class TableLocker(RowLocker):
    """Holds the jobs table itself (SQLite: the database), so a claim waits on it:
    ``mode`` "write" stops every statement, "read" (MariaDB) lets plain reads through,
    so the claim waits inside its transaction, at its SELECT ... FOR UPDATE."""

    def __init__(self, db, backend: str, mode: str = "write") -> None:
        super().__init__(db, backend)
        self.mode = mode

    def _main(self) -> None:
        db = self.db
        if self.backend == "sqlite":
            db.execute_sql("BEGIN IMMEDIATE")
        elif self.backend == "postgres":
            db.execute_sql("BEGIN")
            lock = "ACCESS EXCLUSIVE" if self.mode == "write" else "EXCLUSIVE"
            db.execute_sql(f"LOCK TABLE caravel_jobs IN {lock} MODE")
        else:
            db.execute_sql(f"LOCK TABLES caravel_jobs {self.mode.upper()}")
        self.held.set()
        self.release.wait(30)
        db.execute_sql("UNLOCK TABLES" if self.backend == "mysql" else "ROLLBACK")
        db.close()


@pytest.mark.parametrize("mode", ["write", "read"])
@pytest.mark.parametrize("ride_out", [False, True])
def test_sigint_during_a_stalled_claim_ends_the_run(db, connect, backend, ride_out, mode):
    # Python's own SIGINT handling: KeyboardInterrupt inside the claim's transaction.
    # On MariaDB its rollback on the connection the interrupt broke used to raise an
    # InterfaceError over it, read as a lost reply: the claim ran again and the worker
    # went on running jobs after SIGINT (and so it did with max_outage).
    registry = JobRegistry()
    stop = threading.Event()
    ran = []
    main = threading.main_thread().ident

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        ran.append(job.n)
        stop.set()  # a run that goes on after SIGINT ends normally here

    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(0))
    locker = TableLocker(connect(), backend, mode)
    locker.hold()
    threading.Timer(0.7, signal.pthread_kill, (main, signal.SIGINT)).start()
    threading.Timer(1.2, locker.release.set).start()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)))
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run(QUEUE, stop=stop, max_outage=30 if ride_out else None)
    finally:
        locker.release.set()
    assert ran == []
    found = status(queue, job_id)  # never claimed, or handed back: attempt unused
    assert (found.state, found.attempts) == (JobState.PENDING, 0)


def test_a_second_interrupt_during_the_hand_back_ends_one_write_not_the_rest(
        db, connect, backend):
    # prefetch 5, concurrency 1: job 0 runs, jobs 1-4 wait. Job 0 locks job 1's row,
    # stops the worker (the first SIGINT of handle_signals) and interrupts it while
    # the hand-back of job 1 waits on that lock (the second SIGINT).
    registry = JobRegistry()
    stop = threading.Event()
    main = threading.main_thread().ident
    ids = []
    locker = None

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        nonlocal locker
        if job.n != 0:
            return
        locker = OneRowLocker(connect(), backend, ids[1])
        locker.hold()
        stop.set()
        threading.Timer(0.7, signal.pthread_kill, (main, signal.SIGINT)).start()
        threading.Timer(1.4, locker.release.set).start()

    queue = DatabaseQueue(db, registry, options(lease=30))
    ids.extend(enqueue(queue, Step(n)) for n in range(5))
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)), prefetch=5)
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run(QUEUE, stop=stop)
    finally:
        if locker is not None:
            locker.release.set()
    assert status(queue, ids[0]).state is JobState.COMPLETED
    for job_id in ids[2:]:  # handed back after the interrupt ended job 1's write
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.PENDING, 0)


class OneRowLocker(RowLocker):
    def __init__(self, db, backend: str, job_id) -> None:
        super().__init__(db, backend)
        self.job_id = job_id

    def _main(self) -> None:
        db = self.db
        if self.backend == "sqlite":
            db.execute_sql("BEGIN IMMEDIATE")
        else:
            db.execute_sql("BEGIN")
            db.execute_sql(f"SELECT id FROM caravel_jobs WHERE id = {db.param} FOR UPDATE",
                           (str(self.job_id),)).fetchall()
        self.held.set()
        self.release.wait(30)
        db.execute_sql("ROLLBACK")
        db.close()


@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit])
def test_run_once_ended_by_an_interrupt_writes_what_it_holds(db, raised):
    # prefetch 5: completions wait for the batch to end and four leases wait in the
    # worker. An interrupt out of run_once (a Ctrl-C in the handler, which runs in the
    # caller's thread) is most likely the process ending, without a close().
    registry = JobRegistry()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        if job.n == 2:
            raise raised()

    queue = DatabaseQueue(db, registry, options(lease=30, max_attempts=3))
    ids = [enqueue(queue, Step(n)) for n in range(5)]
    worker = QueueWorker(queue, prefetch=5)
    with pytest.raises(raised):
        while worker.run_once(QUEUE):
            pass
    states = [(status(queue, job_id).state, status(queue, job_id).attempts) for job_id in ids]
    assert states == [(JobState.COMPLETED, 1), (JobState.COMPLETED, 1),
                      (JobState.PENDING, 1),  # its failure, written before the raise
                      (JobState.PENDING, 0), (JobState.PENDING, 0)]  # handed back


def test_a_second_ctrl_c_while_a_returned_job_is_settled_during_a_stop_still_writes_it(
        db, connect):
    """handle_signals: the first SIGINT stops the worker, which waits for a handler
    that ignores it; a quick one returns, and the second SIGINT lands as its report is
    settled (in the "returned while the worker was stopping" log line). The report is
    kept and settled by the exit path: the job is completed, not left leased."""
    import logging
    import os
    import time

    from caravel_lite.worker import handle_signals

    registry = JobRegistry()
    started = threading.Barrier(3)
    release_slow = threading.Event()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        started.wait(10)
        if job.n == 0:
            ctx.cancelled.wait(10)  # returns normally once told to stop
        else:
            release_slow.wait(5)  # ignores the stop for a while

    queue = DatabaseQueue(db, registry, options(lease=30))
    quick, slow = enqueue(queue, Step(0)), enqueue(queue, Step(1))

    class SecondCtrlC(logging.Handler):
        fired = False

        def emit(self, record: logging.LogRecord) -> None:
            if not self.fired and "returned while the worker was stopping" in \
                    record.getMessage():
                self.fired = True
                os.kill(os.getpid(), signal.SIGINT)

    second = SecondCtrlC()
    log = logging.getLogger("caravel_lite")
    level = log.level
    log.setLevel(logging.INFO)
    log.addHandler(second)

    def first_ctrl_c() -> None:
        started.wait(10)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=first_ctrl_c, daemon=True).start()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         concurrency=2, poll_interval=0.2, shutdown_timeout=5)
    stop = threading.Event()
    try:
        with handle_signals(stop):
            with pytest.raises(KeyboardInterrupt):
                worker.run(QUEUE, stop=stop)
    finally:
        release_slow.set()
        log.removeHandler(second)
        log.setLevel(level)
    assert second.fired
    assert status(queue, quick).state is JobState.COMPLETED
    assert status(queue, slow).state is JobState.LEASED  # abandoned: its lease runs out


@pytest.mark.parametrize("where", ["before-commit", "after-commit"])
def test_an_interrupted_failure_write_is_written_once_by_the_exit_path(db, connect,
                                                                         monkeypatch, caplog,
                                                                         where):
    """An interrupt inside the write of a handler's failure: the exit path writes it
    (one failure recorded, the attempt counted once) and never reports the job as not
    acknowledged when nothing else owns its lease."""
    import logging

    registry = JobRegistry()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        raise ValueError("boom")

    queue = DatabaseQueue(db, registry, options(lease=30))
    job_id = enqueue(queue, Step(0))
    real_fail = DatabaseQueue.fail
    calls = []

    def fail(self, lease, failure, error=None):
        calls.append(1)
        if len(calls) == 1 and where == "before-commit":
            raise KeyboardInterrupt
        done = real_fail(self, lease, failure, error=error)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return done

    monkeypatch.setattr(DatabaseQueue, "fail", fail)
    caplog.set_level(logging.INFO, "caravel_lite")
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         concurrency=1, poll_interval=0.1, shutdown_timeout=2)
    with pytest.raises(KeyboardInterrupt):
        worker.run(QUEUE)
    found = status(queue, job_id)
    assert found.state is JobState.PENDING and found.attempts == 1
    assert db.execute_sql("SELECT count(*) FROM caravel_failures").fetchone()[0] == 1
    lost = [r for r in caplog.records if "not acknowledged" in r.getMessage()]
    assert len(lost) == (0 if where == "before-commit" else 1)  # after: its reply was lost
