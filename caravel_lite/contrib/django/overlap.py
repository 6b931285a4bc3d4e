"""Caravel backends that would fail each other's jobs, found before any job is.

A worker claims by queue name, whatever the tenant, and dead-letters a job whose task it
has not registered (``UNKNOWN_JOB_TYPE``). So two Caravel backends of ``TASKS`` that
keep their queue in the same database, share a queue name and find different task
modules would each claim the other's jobs and fail them. Such a pair is refused: by
the system check ``caravel_lite.E001`` (``CaravelBackend.check``, run by ``manage.py
check``, ``migrate``, ``runserver`` and ``test``) and by ``manage.py caravel_worker``
even when the checks are skipped.

Two backends share a database when their ``DATABASE`` entries name the same engine,
name, host and port, or their ``DATABASE_URL`` s are equal; backends that list no
``QUEUES`` accept every queue name, so they share one with every backend.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, FrozenSet, Iterator, List, Optional, Tuple

from django.conf import settings
from django.core import checks

__all__ = ["Overlap", "overlaps_of", "check_messages"]

CHECK_ID = "caravel_lite.E001"


@dataclass(frozen=True)
class Overlap:
    """Backend ``alias`` and backend ``other`` claim each other's jobs in ``queues``
    (None: every queue name)."""

    alias: str
    other: str
    queues: Optional[Tuple[str, ...]]

    def message(self) -> str:
        where = ("every queue name" if self.queues is None
                 else "queue " + ", ".join(repr(name) for name in self.queues))
        return (f"TASKS[{self.alias!r}] and TASKS[{self.other!r}] keep their queues in the "
                f"same database and share {where}, but find different task modules "
                f"(TASK_MODULES): each one's worker would claim the other's jobs and fail "
                f"them (UNKNOWN_JOB_TYPE)")


def _place(backend: Any) -> Tuple[Any, ...]:
    """Where the backend's queue is: its URL, or its Django database's identity."""
    config = backend.config
    if config.database_url is not None:
        return ("url", config.database_url.strip())
    entry = settings.DATABASES.get(config.database, {})
    return ("django", entry.get("ENGINE"), entry.get("NAME"), entry.get("HOST") or "",
            str(entry.get("PORT") or ""))


def _modules(backend: Any) -> FrozenSet[str]:
    from caravel_lite.contrib.django.registry import default_modules

    modules = backend.config.task_modules
    return frozenset(default_modules() if modules is None else modules)


def _caravel_backends() -> Iterator[Any]:
    from caravel_lite.contrib.django.backend import CaravelBackend
    from caravel_lite.contrib.django.compat import task_backends

    for alias in getattr(settings, "TASKS", {}):
        backend = task_backends[alias]
        if isinstance(backend, CaravelBackend):
            yield backend


def overlaps_of(alias: str) -> List[Overlap]:
    """The other Caravel backends that would fail the jobs of backend ``alias``."""
    backends = {backend.alias: backend for backend in _caravel_backends()}
    mine = backends.get(alias)
    if mine is None:
        return []
    found: List[Overlap] = []
    for other in backends.values():
        if other.alias == alias or _place(other) != _place(mine) \
                or _modules(other) == _modules(mine):
            continue
        if not mine.queues or not other.queues:
            found.append(Overlap(alias, other.alias, None))
        elif mine.queues & other.queues:
            found.append(Overlap(alias, other.alias, tuple(sorted(mine.queues & other.queues))))
    return found


def check_messages(alias: str) -> List[checks.CheckMessage]:
    """The system check's errors for backend ``alias`` (each pair once: from the alias
    that sorts first)."""
    return [checks.Error(overlap.message(), id=CHECK_ID,
                         hint="give each backend its own QUEUES names, or the same "
                              "TASK_MODULES")
            for overlap in overlaps_of(alias) if overlap.alias < overlap.other]
