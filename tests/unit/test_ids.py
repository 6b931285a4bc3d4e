"""Job ids (caravel_lite.ids): UUIDv7 layout, unique and ordered within a process, and
random bits a forked child never shares with its parent."""
from __future__ import annotations

import os
import sys
import uuid

import pytest

from caravel_lite import ids
from tests.databases import in_ci

RANDOM_BITS = (1 << 62) - 1


def test_ids_are_version_7_unique_and_in_creation_order():
    made = [ids.new_id() for _ in range(3 * ids.POOL_BYTES // 8)]  # across pool refills
    assert made == sorted(made) and len(set(made)) == len(made)
    assert {(u.version, u.variant) for u in made} == {(7, uuid.RFC_4122)}
    assert len({u.int & RANDOM_BITS for u in made}) == len(made)


def _require_fork() -> None:
    if not hasattr(os, "fork"):  # Windows: no fork, and nothing here to protect
        if in_ci():
            pytest.fail("CI=true and os.fork is not available", pytrace=False)
        pytest.skip("os.fork is not available here")


def test_a_forked_child_never_hands_out_the_random_bits_its_parent_holds():
    _require_fork()
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


def test_a_child_forked_while_another_thread_makes_ids_can_make_its_own():
    _require_fork()
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


def test_ids_made_and_read_here_are_uuid_in_every_respect():
    import copy
    import pickle

    for made in [ids.new_id() for _ in range(50)] + [uuid.uuid4() for _ in range(50)]:
        text = str(made)
        for candidate in (ids.from_text(text), ids.from_text(text.upper())):
            reference = uuid.UUID(text)
            assert type(candidate) is uuid.UUID
            assert candidate == reference and hash(candidate) == hash(reference)
            assert str(candidate) == text and candidate.hex == reference.hex
            assert (candidate.version, candidate.variant) == (reference.version,
                                                              reference.variant)
            assert candidate.is_safe is uuid.SafeUUID.unknown
            assert pickle.loads(pickle.dumps(candidate)) == reference
            assert copy.deepcopy(candidate) == reference
            assert not candidate < reference and not candidate > reference
    for bad in ("not-a-uuid", "0" * 36, "{" + str(uuid.uuid4()) + "}"[:-1]):
        try:
            expected = uuid.UUID(bad)
        except ValueError:
            with pytest.raises(ValueError):
                ids.from_text(bad)
        else:
            assert ids.from_text(bad) == expected
