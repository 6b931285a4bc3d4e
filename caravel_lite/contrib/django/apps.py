"""The Django app ``caravel_lite.contrib.django``: its migration applies caravel_lite's
schema, its management commands run the worker and the migrations."""
from __future__ import annotations

from django.apps import AppConfig


class CaravelConfig(AppConfig):  # type: ignore[misc]
    name = "caravel_lite.contrib.django"
    label = "caravel_lite"
    verbose_name = "caravel_lite"

    def ready(self) -> None:
        # The check that refuses backends failing each other's jobs (caravel_lite.E001),
        # registered here rather than left to the task framework, whose own checks
        # run only where its app is installed or its package imported.
        from django.core import checks

        from caravel_lite.contrib.django.overlap import check_overlaps

        checks.register(check_overlaps)
