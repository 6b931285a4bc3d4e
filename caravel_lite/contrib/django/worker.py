"""The queue ``manage.py caravel_worker`` serves: ``backends.<alias>`` is a callable
(caravel-lite's ``MODULE:ATTR`` target) returning the Caravel backend's DatabaseQueue
on a database of its own, with the backend's registered tasks."""
from __future__ import annotations

from typing import Any, Callable, cast

from caravel_lite.queue import DatabaseQueue

__all__ = ["backends"]


class _Backends:
    def __getattr__(self, alias: str) -> Callable[[], DatabaseQueue]:
        def queue() -> DatabaseQueue:
            from caravel_lite.contrib.django.compat import task_backends

            backend: Any = task_backends[alias]
            return cast(DatabaseQueue, backend.queue(backend.open_database()))
        return queue


backends = _Backends()
