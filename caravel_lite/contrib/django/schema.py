"""Applying caravel_lite's schema to the databases of a project's Caravel backends
(the app's Django migration and ``manage.py caravel_migrate``)."""
from __future__ import annotations

from typing import Any, List

from caravel_lite.contrib.django import compat
from caravel_lite.migrator import migrate

__all__ = ["caravel_backends", "migrate_backend", "migrate_alias"]


def caravel_backends() -> List[Any]:
    """Every ``TASKS`` backend that is a CaravelBackend, in settings order."""
    from django.conf import settings

    from caravel_lite.contrib.django.backend import CaravelBackend

    found = [compat.task_backends[alias] for alias in (getattr(settings, "TASKS", None) or {})]
    return [backend for backend in found if isinstance(backend, CaravelBackend)]


def migrate_backend(backend: Any) -> List[str]:
    """Bring the backend's database to caravel_lite's current schema on a connection
    of its own (caravel_lite's migrator holds its migration lock for the run); the
    scripts applied."""
    db = backend.open_database()
    try:
        return list(migrate(db))
    finally:
        db.close()


def migrate_alias(alias: str) -> List[str]:
    """:func:`migrate_backend` for the backends keeping their jobs in Django's database
    ``alias`` (none: nothing to do)."""
    applied: List[str] = []
    for backend in caravel_backends():
        if backend.config.database == alias:
            applied += migrate_backend(backend)
    return applied
