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
