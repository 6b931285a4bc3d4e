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
# The process that read the pool: a forked child must never hand out the bytes its
# parent still holds (the two would make equal ids in the same millisecond and count).
_pool_pid = 0


def new_id() -> uuid.UUID:
    global _last_ms, _counter, _pool, _pool_at, _pool_pid
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
        if _pool_at < len(_pool) and _pool_pid == os.getpid():
            chunk = _pool[_pool_at:_pool_at + 8]
            _pool_at += 8
        else:
            chunk = b""
    if not chunk:
        # Read outside the lock: os.urandom lets other threads run, and a process
        # forked while this thread held the lock would find it held for good.
        fresh = os.urandom(POOL_BYTES)
        with _lock:
            _pool, _pool_at, _pool_pid = fresh, 8, os.getpid()
        chunk = fresh[:8]
    # 48 bits of milliseconds (enough until the year 10889), version 7, the 12-bit
    # counter; then the variant (0b10) and 62 random bits. Built as two 64-bit halves:
    # fewer operations on the 128-bit number, which cost more than the rest of the id.
    high = ms << 16 | 0x7000 | counter
    low = int.from_bytes(chunk, "big") >> 2 | 1 << 63
    return uuid.UUID(int=high << 64 | low)
