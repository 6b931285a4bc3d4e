"""caravel_lite.flags.LazyEvent: threading.Event's behaviour, with its condition made on
the first wait() only."""
from __future__ import annotations

import threading

from caravel_lite.flags import LazyEvent
from caravel_lite.values import JobContext


def test_it_is_set_and_cleared_like_an_event_without_making_a_condition():
    flag = LazyEvent()
    assert isinstance(flag, threading.Event)
    assert not flag.is_set()
    flag.set()
    assert flag.is_set()
    assert "_cond" not in vars(flag)  # nobody waited: no condition was made
    assert flag.wait(0)  # set already: at once
    flag.clear()
    assert not flag.is_set()
    assert not flag.wait(0.01)


def test_a_waiter_wakes_when_another_thread_sets_it():
    flag = LazyEvent()
    woke = []
    waiting = threading.Thread(target=lambda: woke.append(flag.wait(10)))
    waiting.start()
    while "_cond" not in vars(flag):  # the waiter made the condition and waits on it
        threading.Event().wait(0.001)
    flag.set()
    waiting.join(10)
    assert woke == [True]


def test_no_set_is_lost_between_threads_racing_to_wait_and_set():
    """Many rounds of one thread waiting as another sets: every wait sees the set."""
    for _ in range(300):
        flag = LazyEvent()
        start = threading.Barrier(2)
        seen = []

        def waiter() -> None:
            start.wait()
            seen.append(flag.wait(5))

        thread = threading.Thread(target=waiter)
        thread.start()
        start.wait()
        flag.set()
        thread.join(5)
        assert seen == [True]


def test_a_jobs_context_gets_its_own():
    one, two = (JobContext(None, "q", "t", 1) for _ in range(2))  # type: ignore[arg-type]
    assert isinstance(one.cancelled, LazyEvent) and one.cancelled is not two.cancelled


def test_a_context_cannot_be_pickled_or_deep_copied_as_with_threading_event():
    """A copy would carry a flag that no worker ever sets."""
    import copy
    import pickle

    import pytest

    ctx = JobContext(None, "q", "t", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        pickle.dumps(ctx)
    with pytest.raises(TypeError):
        copy.deepcopy(ctx)
    with pytest.raises(TypeError):
        copy.copy(ctx.cancelled)


def test_a_signal_handler_may_set_the_flag_the_main_thread_waits_on():
    import signal

    flag = LazyEvent()
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: flag.set())
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        assert flag.wait(5)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_forked_child_can_use_flags_while_another_thread_waits_on_one():
    """No lock is shared between flags, so none can be held across a fork by another
    thread's first wait()."""
    import os

    waiting = LazyEvent()
    thread = threading.Thread(target=lambda: waiting.wait(10), daemon=True)
    thread.start()
    try:
        for _ in range(20):
            pid = os.fork()
            if pid == 0:  # the child: a new flag, set then waited on, then exit
                fresh = LazyEvent()
                fresh.set()
                os._exit(0 if fresh.wait(1) else 1)
            for _ in range(500):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                threading.Event().wait(0.01)
            else:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise AssertionError("the forked child hung on its flag")
            assert os.waitstatus_to_exitcode(status) == 0
    finally:
        waiting.set()
        thread.join(5)
