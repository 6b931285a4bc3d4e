"""The contract suite for Django tasks backends, run against caravel_lite's backend on
each database and, where it applies, against Django's own ImmediateBackend: the same
tests pass on both, so they test Django's contract rather than caravel_lite."""
from __future__ import annotations

from typing import Any

import pytest

from caravel_lite.contrib.django.contract import Harness
from caravel_lite.contrib.django.contract.suite import TaskBackendContract
from caravel_lite.testing import drain
from tests.django.conftest import empty


def caravel_harness(backend: Any) -> Harness:
    queue = backend.queue()
    return Harness(backend.alias, work=lambda: drain(queue, "default", "other"),
                   clear=lambda: empty(backend))


class TestCaravelBackend(TaskBackendContract):
    @pytest.fixture
    def harness(self, django_backend: Any) -> Harness:
        return caravel_harness(django_backend)


class TestImmediateBackend(TaskBackendContract):
    @pytest.fixture
    def harness(self, project: Any) -> Harness:
        return Harness("immediate", runs_inline=True)


def test_no_contract_case_skips_for_caravel_lite(django_backend: Any) -> None:
    """The suite skips a case only where a backend lacks what it tests (a supports_*
    flag unset, or tasks run inside enqueue): for caravel_lite none of that holds, so
    a skip in TestCaravelBackend could only hide missing behaviour."""
    harness = caravel_harness(django_backend)
    for flag in ("supports_defer", "supports_async_task", "supports_get_result",
                 "supports_priority"):
        assert getattr(harness.backend, flag) is True, flag
    assert not harness.runs_inline
