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


def new_id() -> uuid.UUID:
    global _last_ms, _counter
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
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand
    return uuid.UUID(int=value)
