"""Caravel backends that would fail each other's jobs, found before any job is.

A worker claims by queue name, whatever the tenant, and dead-letters a job whose task it
has not registered (``UNKNOWN_JOB_TYPE``). So two Caravel backends of ``TASKS`` that
keep their queue in the same database, share a queue name and find different task
modules would each claim the other's jobs and fail them. Such a pair is refused: by
the system check ``caravel_lite.E001`` (registered by the app, run by ``manage.py
check``, ``migrate``, ``runserver`` and ``test``) and by ``manage.py caravel_worker``
(for the queues it is given) even when the checks are skipped.

Two backends share a database when the URLs their workers open name the same one: the
same kind of server, host (``localhost``, ``127.0.0.1`` and ``::1`` are one), port (the
default filled in) and database, or the same SQLite file by its real path, whether
given as ``DATABASE`` or ``DATABASE_URL``. Backends that list no ``QUEUES`` accept every
queue name, so they share one with every backend.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Collection, FrozenSet, Iterator, List, Optional, Tuple
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks
from playhouse import db_url

__all__ = ["Overlap", "overlaps_of", "check_messages", "check_overlaps"]

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


_LOOPBACK = ("", "localhost", "127.0.0.1", "::1", "[::1]")
_DEFAULT_PORTS = {"postgresql": 5432, "mysql": 3306}


def _place(backend: Any) -> Tuple[Any, ...]:
    """Where the backend's queue is, however its settings spell it: the URL the worker
    opens (its ``DATABASE_URL``, or the one made from Django's entry), read as (kind,
    host, port, database), the loopback names one host, the default port filled in,
    a SQLite file by its real path."""
    from caravel_lite.contrib.django.databases import url_of

    config = backend.config
    if config.database_url is not None:
        url = config.database_url.strip()
    else:
        try:
            url = url_of(config.database)
        except Exception:  # an in-memory or unknown entry: as Django's settings say
            entry = settings.DATABASES.get(config.database, {})
            return ("django", entry.get("ENGINE"), str(entry.get("NAME")))
    kind = urlsplit(url).scheme.split("+")[0].lower()
    kind = "postgresql" if kind.startswith("postgres") else kind
    parts = db_url.parse(url)  # as open_database reads the URL
    if kind.startswith("sqlite"):
        return ("sqlite", os.path.realpath(str(parts.get("database", ""))))
    host = str(parts.get("host") or "").lower()
    host = "localhost" if host in _LOOPBACK else host
    return (kind, host, parts.get("port") or _DEFAULT_PORTS.get(kind),
            parts.get("database"))


def _modules(backend: Any) -> FrozenSet[str]:
    from caravel_lite.contrib.django.registry import default_modules

    modules = backend.config.task_modules
    return frozenset(default_modules() if modules is None else modules)


def _caravel_backends() -> Iterator[Any]:
    """The Caravel backends of TASKS; an entry that cannot be built (another
    framework's backend that fails to import, say) is not this check's to judge."""
    from caravel_lite.contrib.django.backend import CaravelBackend
    from caravel_lite.contrib.django.compat import task_backends

    for alias in getattr(settings, "TASKS", {}):
        try:
            backend = task_backends[alias]
        except Exception:
            continue
        if isinstance(backend, CaravelBackend):
            yield backend


def overlaps_of(alias: str, queues: Optional[Collection[str]] = None) -> List[Overlap]:
    """The other Caravel backends that would fail the jobs of backend ``alias`` in
    ``queues`` (default: its ``QUEUES``; empty: every queue name)."""
    backends = {backend.alias: backend for backend in _caravel_backends()}
    mine = backends.get(alias)
    if mine is None:
        return []
    served = set(mine.queues if queues is None else queues)
    found: List[Overlap] = []
    for other in backends.values():
        if other.alias == alias or _modules(other) == _modules(mine) \
                or _place(other) != _place(mine):
            continue
        if not served or not other.queues:
            shared = sorted(served or other.queues)
            found.append(Overlap(alias, other.alias, tuple(shared) if shared else None))
        elif served & other.queues:
            found.append(Overlap(alias, other.alias, tuple(sorted(served & other.queues))))
    return found


def check_overlaps(app_configs: Any = None, **kwargs: Any) -> List[checks.CheckMessage]:
    """The system check ``caravel_lite.E001`` over every pair of Caravel backends of
    TASKS (each pair once). Registered by the app's ``ready()``, so that it runs
    whichever task framework is installed and whether or not it registers checks."""
    messages: List[checks.CheckMessage] = []
    for backend in _caravel_backends():
        messages += check_messages(backend.alias)
    return messages


def check_messages(alias: str) -> List[checks.CheckMessage]:
    """The system check's errors for backend ``alias`` (each pair once: from the alias
    that sorts first)."""
    return [checks.Error(overlap.message(), id=CHECK_ID,
                         hint="give each backend its own QUEUES names, or the same "
                              "TASK_MODULES")
            for overlap in overlaps_of(alias) if overlap.alias < overlap.other]
