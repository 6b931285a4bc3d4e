"""What the contract suite needs to know of a backend besides its alias."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Harness:
    """``alias``: the backend's key in ``TASKS``, whose ``QUEUES`` must be
    ``["default", "other"]``. ``work``: runs every due task once in this process (a
    worker step); an inline backend, which runs tasks inside ``enqueue``, leaves it as
    is and sets ``runs_inline``. ``clear``: empties the backend's store between tests.
    """

    alias: str
    work: Callable[[], Any] = _nothing
    runs_inline: bool = False
    clear: Callable[[], Any] = _nothing

    @property
    def backend(self) -> Any:
        from caravel_lite.contrib.django.compat import task_backends
        return task_backends[self.alias]
