"""Job and intent identifiers: UUIDs whose leading bits are the creation millisecond and
a per-process counter (the UUIDv7 layout), so ids made in one process sort in creation
order and serve as the claim order's final, deterministic tie-breaker."""
from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = 0
_counter = 0
# The random bits come from the operating system's CSPRNG, read POOL_BYTES at a time:
# one os.urandom per id was a system call on every enqueue, a tenth of its cost.
POOL_BYTES = 4096
_pool = b""
_pool_at = 0
_fork_safe = False  # the child's reset below is registered (on the first id, not at import)


def _reset_in_child() -> None:
    """In a forked child: a new lock (another thread of the parent may have held this
    one at the fork, and would never release it here) and no pool (the child must
    never hand out the bytes its parent still holds: the two would make equal ids in
    the same millisecond and count)."""
    global _lock, _pool, _pool_at
    _lock = threading.Lock()
    _pool, _pool_at = b"", 0


def new_id() -> uuid.UUID:
    global _last_ms, _counter, _pool, _pool_at, _fork_safe
    if not _fork_safe:
        _fork_safe = True
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_reset_in_child)
    with _lock:
        # Real wall time, not the injected clock: ids only need to be unique and
        # roughly ordered, and a frozen test clock must not make them collide.
        ms = time.time_ns() // 1_000_000
        if ms <= _last_ms:
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:  # counter exhausted within one millisecond: borrow the next
                ms += 1
                _counter = 0
        else:
            _counter = 0
        _last_ms = ms
        counter = _counter
        if _pool_at < len(_pool):
            chunk = _pool[_pool_at:_pool_at + 8]
            _pool_at += 8
        else:
            chunk = b""
    if not chunk:
        # Read outside the lock: os.urandom lets other threads run, and a process
        # forked while this thread held the lock would find it held for good.
        fresh = os.urandom(POOL_BYTES)
        with _lock:
            _pool, _pool_at = fresh, 8
        chunk = fresh[:8]
    # 48 bits of milliseconds (enough until the year 10889), version 7, the 12-bit
    # counter; then the variant (0b10) and 62 random bits. Built as two 64-bit halves:
    # fewer operations on the 128-bit number, which cost more than the rest of the id.
    high = ms << 16 | 0x7000 | counter
    low = int.from_bytes(chunk, "big") >> 2 | 1 << 63
    return _uuid(high << 64 | low)


# uuid.UUID's constructor checks its arguments in Python (a list built and counted, a
# range check) before storing the two slots it has; the ids below are made or read
# here, known to be in range and well formed, so the slots are stored directly, as
# that constructor itself stores them. tests/unit/test_ids.py holds the result equal
# to uuid.UUID's in every respect the library and its users rely on.
_new = object.__new__
_store = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown


def _uuid(value: int) -> uuid.UUID:
    made: uuid.UUID = _new(uuid.UUID)
    _store(made, "int", value)
    _store(made, "is_safe", _UNKNOWN)
    return made


def from_text(text: str) -> uuid.UUID:
    """The UUID of a job id as the database stores it (36 characters, hyphenated):
    the claim reads one per job. Anything else is parsed by uuid.UUID (and refused
    there with its ValueError)."""
    if len(text) != 36 or text[8] != "-" or text[13] != "-" or text[18] != "-" \
            or text[23] != "-":
        return uuid.UUID(text)
    return _uuid(int(text.replace("-", ""), 16))
