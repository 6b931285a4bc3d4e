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
    assert flag._cond is None  # nobody waited: no condition was made
    assert flag.wait(0)  # set already: at once
    flag.clear()
    assert not flag.is_set()
    assert not flag.wait(0.01)


def test_a_waiter_wakes_when_another_thread_sets_it():
    flag = LazyEvent()
    woke = []
    waiting = threading.Thread(target=lambda: woke.append(flag.wait(10)))
    waiting.start()
    while flag._cond is None:  # the waiter made the condition and waits on it
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
