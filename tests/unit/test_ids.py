"""Job ids (caravel_lite.ids): UUIDv7 layout, unique and ordered within a process, and
random bits a forked child never shares with its parent."""
from __future__ import annotations

import os
import sys
import uuid

import pytest

from caravel_lite import ids

RANDOM_BITS = (1 << 62) - 1


def test_ids_are_version_7_unique_and_in_creation_order():
    made = [ids.new_id() for _ in range(3 * ids.POOL_BYTES // 8)]  # across pool refills
    assert made == sorted(made) and len(set(made)) == len(made)
    assert {(u.version, u.variant) for u in made} == {(7, uuid.RFC_4122)}
    assert len({u.int & RANDOM_BITS for u in made}) == len(made)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available here")
def test_a_forked_child_never_hands_out_the_random_bits_its_parent_holds():
    ids.new_id()  # the parent's pool holds unread random bytes now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next id's random bits, then exit at once
        try:
            os.write(write, str(ids.new_id().int & RANDOM_BITS).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = int(pipe.read())
    os.waitpid(pid, 0)
    parent = ids.new_id().int & RANDOM_BITS
    assert child != parent


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is not available here")
def test_a_child_forked_while_another_thread_makes_ids_can_make_its_own():
    import threading
    import time
    import warnings

    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            ids.new_id()

    thread = threading.Thread(target=churn, daemon=True)
    thread.start()
    hung = 0
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
            for _ in range(40):
                pid = os.fork()
                if pid == 0:  # the child: one id, then out (SIGALRM ends a hung one)
                    import signal
                    signal.alarm(3)
                    ids.new_id()
                    os._exit(0)
                deadline = time.monotonic() + 5
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        break
                    if time.monotonic() > deadline:
                        os.kill(pid, 9)
                        os.waitpid(pid, 0)
                        status = -1
                        break
                    time.sleep(0.005)
                hung += status != 0
    finally:
        stop.set()
        thread.join()
    assert hung == 0, f"{hung} of 40 children could not make an id"
