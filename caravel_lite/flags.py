"""A ``threading.Event`` that costs one object until something waits on it.

Every job's context carries one (``ctx.cancelled``), and almost no handler ever waits
on it: they check ``is_set()``, or never look. A plain ``threading.Event`` builds its
``Condition`` (a lock and a dozen attributes) up front, for every job; this one builds
it on the first ``wait()``, so a job whose handler only checks or ignores it pays for
none of that.
"""
from __future__ import annotations

import threading
from typing import Optional

__all__ = ["LazyEvent"]

# Guards the one-time creation of a flag's condition (rare: a handler waiting on its
# ``ctx.cancelled``), shared by every flag.
_making = threading.Lock()


class LazyEvent(threading.Event):
    """``threading.Event``, same methods and guarantees (``wait`` returns once the
    flag is set, whichever thread sets it and whenever), its condition made on demand.

    Why it is safe: while there is no condition, ``set`` changes the flag under the
    shared creation lock, and a ``wait`` makes the condition under that same lock
    before it reads the flag; once there is one, every change and every read that
    waits goes through it, as in ``threading.Event``."""

    def __init__(self) -> None:  # no super().__init__(): it makes the condition
        self._flag = False
        self._cond: Optional[threading.Condition] = None

    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _making:
                if self._cond is None:
                    self._cond = threading.Condition(threading.Lock())
                cond = self._cond
        return cond

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        cond = self._cond
        if cond is None:
            with _making:
                if self._cond is None:  # nobody waits, nor can start to meanwhile
                    self._flag = True
                    return
                cond = self._cond
        with cond:
            self._flag = True
            cond.notify_all()

    def clear(self) -> None:
        with self._condition():
            self._flag = False

    def wait(self, timeout: Optional[float] = None) -> bool:
        cond = self._condition()
        with cond:
            signaled = self._flag
            if not signaled:
                signaled = cond.wait(timeout)
            return signaled
