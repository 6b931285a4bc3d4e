"""Fixtures of the Django suites: the test project (configured once per process) and
``django_backend``, which parametrises a test over the Caravel backend of each selected
database Django reaches here."""
from __future__ import annotations

import importlib.util
from typing import Any, Iterator

import pytest

from tests.databases import clear_tables, in_ci, selected_backends

if importlib.util.find_spec("django") is None:  # a Python without the django extra
    if in_ci():
        raise RuntimeError("CI=true and Django is not installed: install caravel_lite[django]")
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def project() -> Iterator[Any]:
    from tests.django.project import project as configure

    configured = configure()
    yield configured
    configured.drop()


def _require(backend: str) -> None:
    from tests.django.project import django_reaches

    reason = django_reaches(backend)
    if reason is not None:
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(params=selected_backends())
def django_backend(request: Any, project: Any) -> Iterator[Any]:
    """The Caravel backend on one database, its tables emptied before the test."""
    from caravel_lite.contrib.django.compat import task_backends

    _require(request.param)
    backend = task_backends[project.alias(request.param)]
    empty(backend)
    yield backend


def empty(backend: Any) -> None:
    queue = backend.queue()
    with queue.db.connection_context():
        clear_tables(queue.db)
