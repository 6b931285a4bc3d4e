"""For a project's own tests: run the due tasks of a Caravel backend in the test's
thread, as its worker would (``caravel_lite.testing.drain``), on a connection opened
and closed by the call, so that Django can drop its test database afterwards.

Use it from a ``TransactionTestCase``: the worker's connection sees only committed
jobs, and a ``TestCase`` never commits."""
from __future__ import annotations

from typing import Any, Sequence

from caravel_lite.contrib.django.compat import task_backends
from caravel_lite.testing import DrainResult, drain

__all__ = ["run_tasks"]


def run_tasks(alias: str = "default", queue_names: Sequence[str] = (),
              max_jobs: int = 1000) -> DrainResult:
    """Run every due task of backend ``alias`` (on ``queue_names``, default all of its
    ``QUEUES``) until none is due; what ran, as :class:`caravel_lite.testing.DrainResult`."""
    backend: Any = task_backends[alias]
    db = backend.open_database()
    try:
        return drain(backend.queue(db), *(queue_names or sorted(backend.queues)),
                     max_jobs=max_jobs)
    finally:
        db.close()
