"""Every way a run ends goes through one exit path (every database): an interrupt
(SIGINT's KeyboardInterrupt, or a SIGTERM handler calling sys.exit) still writes every
completion the worker holds and hands back what did not start; a handler raising a
BaseException fails its job and leaves the worker working; a run after a handler
abandoned at the shutdown timeout starts its jobs at once."""
from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import List

import pytest

from caravel_lite import DatabaseQueue, Failure, JobContext, JobRegistry, JobState, QueueWorker
from caravel_lite.worker import loop as loop_module

from tests.support import wait_for
from tests.worker.helpers import QUEUE, WorkerThread, enqueue, options, status


@dataclass(frozen=True)
class Step:
    n: int


QUICK = 15          # jobs that return at once
SIGNALLER = QUICK   # the job that interrupts the worker, then ignores the cancellation
TOTAL = QUICK + 5   # the last four are claimed and never started


@pytest.mark.parametrize("how", ["sigint", "sigterm-exit"])
def test_an_interrupt_writes_every_completion_it_holds_and_the_worker_runs_again(
        db, connect, monkeypatch, how):
    # Completions wait for the exit path: none is written by the loop's linger.
    monkeypatch.setattr(loop_module, "ACK_LINGER", 30.0)
    registry = JobRegistry()
    returned: List[int] = []
    release = threading.Event()
    signum = signal.SIGINT if how == "sigint" else signal.SIGTERM
    main = threading.main_thread().ident
    assert threading.get_ident() == main  # signals reach the worker's loop thread

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        if job.n == SIGNALLER:
            signal.pthread_kill(main, signum)  # type: ignore[arg-type]
            release.wait(30)  # ignores the cancellation: abandoned by the interrupt
            return
        returned.append(job.n)

    queue = DatabaseQueue(db, registry, options(lease=30))
    ids = [enqueue(queue, Step(n)) for n in range(TOTAL)]
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         prefetch=TOTAL, shutdown_timeout=10)
    previous = signal.getsignal(signal.SIGTERM)
    if how == "sigterm-exit":  # the common application pattern
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    try:
        with pytest.raises(KeyboardInterrupt if how == "sigint" else SystemExit):
            worker.run(QUEUE)
    finally:
        signal.signal(signal.SIGTERM, previous)
        release.set()
    assert returned == list(range(QUICK))
    for n, job_id in enumerate(ids):
        found = status(queue, job_id)
        if n < QUICK:  # returned before the interrupt: completed
            assert (found.state, found.attempts) == (JobState.COMPLETED, 1), n
        elif n == SIGNALLER:  # still running when abandoned: leased until its lease ends
            assert (found.state, found.attempts) == (JobState.LEASED, 1)
        else:  # claimed, never started: handed back, attempt unused
            assert (found.state, found.attempts) == (JobState.PENDING, 0), n
    # Reusable: the same worker runs the handed-back jobs.
    stop = threading.Event()
    again = WorkerThread(worker, stop).start()
    wait_for(lambda: all(status(queue, job_id).state is JobState.COMPLETED
                         for job_id in ids[SIGNALLER + 1:]), timeout=10)
    stop.set()
    again.join()
    assert sorted(returned) == sorted(list(range(QUICK)) + list(range(SIGNALLER + 1, TOTAL)))


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_handler_raising_a_base_exception_fails_its_job_and_the_worker_goes_on(
        db, connect, kind, raised):
    registry = JobRegistry()
    ran: List[int] = []

    if kind == "sync":
        @registry.job("tests.step.v1", Step)
        def handle(job: Step, ctx: JobContext) -> None:
            ran.append(job.n)
            if job.n == 0:
                raise raised(3)
    else:
        @registry.job("tests.step.v1", Step)
        async def handle_async(job: Step, ctx: JobContext) -> None:
            ran.append(job.n)
            await asyncio.sleep(0)
            if job.n == 0:
                raise raised(3)

    queue = DatabaseQueue(db, registry, options(lease=30, max_attempts=1))
    ids = [enqueue(queue, Step(n)) for n in range(4)]
    stop = threading.Event()
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30, max_attempts=1)),
                         concurrency=2, shutdown_timeout=30)
    running = WorkerThread(worker, stop).start()
    try:
        wait_for(lambda: all(status(queue, job_id).state is JobState.COMPLETED
                             for job_id in ids[1:]), timeout=10)
        failed = status(queue, ids[0])  # one outcome: a handler failure, dead-lettered
        assert (failed.state, failed.last_failure) == (JobState.DEAD_LETTER,
                                                        Failure.HANDLER_FAILED)
    finally:
        stop.set()
        began = time.monotonic()
        running.join(40)
    assert time.monotonic() - began < 5  # no slot left taken: no shutdown timeout
    assert sorted(ran) == [0, 1, 2, 3]


def test_a_run_after_a_handler_abandoned_at_the_shutdown_timeout_starts_its_job(db, connect):
    registry = JobRegistry()
    started: List[int] = []
    release = threading.Event()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        started.append(job.n)
        if job.n == 0:
            release.wait(30)  # ignores the cancellation: abandoned

    queue = DatabaseQueue(db, registry, options(lease=30))
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         shutdown_timeout=0.2)
    try:
        enqueue(queue, Step(0))
        stop = threading.Event()
        first = WorkerThread(worker, stop).start()
        wait_for(lambda: started == [0], timeout=10)
        stop.set()
        first.join()  # after the 0.2 s shutdown timeout, job 0's handler still running
        later = enqueue(queue, Step(1))
        stop = threading.Event()
        second = WorkerThread(worker, stop).start()
        # Started while job 0's handler is still stuck in its old thread.
        wait_for(lambda: status(queue, later).state is JobState.COMPLETED, timeout=10)
        assert started == [0, 1] and not release.is_set()
        stop.set()
        second.join()
    finally:
        release.set()


def test_a_second_sigint_during_the_stop_still_writes_what_finished(db, connect):
    registry = JobRegistry()
    stop = threading.Event()
    release = threading.Event()
    started = threading.Event()
    main = threading.main_thread().ident

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        if job.n == 0:
            started.set()
            release.wait(30)  # ignores the cancellation: the stop waits for it
            return
        assert started.wait(10)
        stop.set()  # the first SIGINT
        assert ctx.cancelled.wait(10)
        # The second SIGINT, once this job's outcome is with the stopping worker.
        threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT)).start()

    queue = DatabaseQueue(db, registry, options(lease=30))
    ids = [enqueue(queue, Step(n)) for n in range(2)]
    worker = QueueWorker(DatabaseQueue(connect(), registry, options(lease=30)),
                         concurrency=2, shutdown_timeout=20)
    began = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.run(QUEUE, stop=stop)
    finally:
        release.set()
    assert time.monotonic() - began < 10  # not the 20 s shutdown timeout
    assert status(queue, ids[1]).state is JobState.COMPLETED  # returned: written
    assert status(queue, ids[0]).state is JobState.LEASED     # abandoned


@pytest.mark.parametrize("raised", [SystemExit, KeyboardInterrupt])
def test_run_once_writes_the_failure_before_raising_an_interrupt_again(db, raised):
    registry = JobRegistry()

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        raise raised(2)

    queue = DatabaseQueue(db, registry, options(lease=30, max_attempts=3))
    job_id = enqueue(queue, Step(0))
    worker = QueueWorker(queue)
    with pytest.raises(raised):  # in the caller's thread it may be the process's own
        worker.run_once(QUEUE)
    worker.close()
    found = status(queue, job_id)  # one outcome, written: a failed attempt, retried
    assert (found.state, found.attempts, found.last_failure) == (
        JobState.PENDING, 1, Failure.HANDLER_FAILED)


def test_an_interrupt_while_completions_are_written_keeps_them_for_the_exit_path(
        db, connect):
    """A SIGINT that lands inside the statement writing a batch of completions (a loop
    held up by a lock, say) does not drop the batch: the exit path writes it."""
    registry = JobRegistry()
    returned: List[int] = []

    @registry.job("tests.step.v1", Step)
    def handle(job: Step, ctx: JobContext) -> None:
        returned.append(job.n)

    queue = DatabaseQueue(db, registry, options(lease=30))
    ids = [enqueue(queue, Step(n)) for n in range(5)]
    worker_queue = DatabaseQueue(connect(), registry, options(lease=30))
    write = worker_queue.complete_many
    calls: List[int] = []

    def interrupted_once(leases):  # the loop's thread is the main thread: SIGINT lands here
        calls.append(len(leases))
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)
        return write(leases)

    worker_queue.complete_many = interrupted_once  # type: ignore[method-assign]
    worker = QueueWorker(worker_queue, prefetch=5)
    with pytest.raises(KeyboardInterrupt):
        worker.run(QUEUE)
    assert sorted(returned) == list(range(5))
    assert len(calls) >= 2, calls  # the exit path wrote them again
    for job_id in ids:
        found = status(queue, job_id)
        assert (found.state, found.attempts) == (JobState.COMPLETED, 1)
