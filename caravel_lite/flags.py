"""A ``threading.Event`` that costs one object until something waits on it.

Every job's context carries one (``ctx.cancelled``), and almost no handler ever waits
on it: they check ``is_set()``, or never look. A plain ``threading.Event`` builds its
``Condition`` up front, for every job (a lock, a dozen attributes and three caught
``AttributeError`` while it probes the lock); this one builds it on the first
``wait()``, so a job whose handler only checks or ignores it pays for none of that.
"""
from __future__ import annotations

import threading
from typing import Any, NoReturn, Optional

__all__ = ["LazyEvent"]


class LazyEvent(threading.Event):
    """``threading.Event``, same methods and guarantees (``wait`` returns True once the
    flag is set, whichever thread sets it and whenever), its condition made on demand.

    No lock is shared between flags or taken by ``set`` while nobody waits, so a flag
    may be set from a signal handler or in a forked child as a ``threading.Event``
    may. Why no wake-up is lost: ``set`` writes the flag and then looks for a
    condition; ``wait`` makes the condition (one atomic ``dict.setdefault``: two first
    waiters get the same one) and then reads the flag under it. Whichever comes
    second sees what the other did."""

    def __init__(self) -> None:  # no super().__init__(): it makes the condition
        self._flag = False

    def _condition(self) -> threading.Condition:
        cond: Optional[threading.Condition] = self.__dict__.get("_cond")
        if cond is None:
            cond = self.__dict__.setdefault("_cond", threading.Condition(threading.Lock()))
        return cond

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        cond: Optional[threading.Condition] = self.__dict__.get("_cond")
        if cond is not None:
            with cond:
                cond.notify_all()

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: Optional[float] = None) -> bool:
        cond = self._condition()
        with cond:
            if not self._flag:
                cond.wait(timeout)
            return self._flag

    def _at_fork_reinit(self) -> None:
        cond: Optional[threading.Condition] = self.__dict__.get("_cond")
        if cond is not None:
            cond._at_fork_reinit()  # type: ignore[attr-defined]

    def __reduce_ex__(self, protocol: Any) -> NoReturn:
        # As threading.Event (its lock cannot be pickled): a copied context would
        # carry a flag that no worker ever sets.
        raise TypeError(f"cannot pickle {type(self).__name__!r} object")
