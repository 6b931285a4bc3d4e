"""caravel_lite as a Django tasks backend (the extra ``django``): Django 6.x's
``django.tasks`` and the ``django_tasks`` backport for Django 4.2-5.2.

``TASKS = {"default": {"BACKEND": "caravel_lite.contrib.django.CaravelBackend"}}``,
``"caravel_lite.contrib.django"`` in ``INSTALLED_APPS`` (its migration applies
caravel_lite's schema, its commands are ``caravel_worker`` and ``caravel_migrate``), and
``path("ops/queue/", include("caravel_lite.contrib.django.urls"))`` for the dashboard.
Importing this package imports nothing of Django's until ``CaravelBackend`` is used.
"""
from __future__ import annotations

from typing import Any

__all__ = ["CaravelBackend"]


def __getattr__(name: str) -> Any:
    if name == "CaravelBackend":
        from caravel_lite.contrib.django.backend import CaravelBackend
        return CaravelBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
