"""A contract suite for any Django tasks backend (``django.tasks`` or the backport).

Subclass :class:`~caravel_lite.contrib.django.contract.suite.TaskBackendContract` in a
pytest module and give it a ``harness`` fixture returning a :class:`Harness` for the
backend under test; list ``caravel_lite.contrib.django.contract.tasks`` among the
modules whose tasks the backend may run. Each test asserts what Django documents of
the backend contract, and skips (saying why) where the backend's ``supports_*`` flags
or an inline backend make it not apply.
"""
from caravel_lite.contrib.django.contract.harness import Harness

__all__ = ["Harness"]
