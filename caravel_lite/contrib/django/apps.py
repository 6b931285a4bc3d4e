"""The Django app ``caravel_lite.contrib.django``: its migration applies caravel_lite's
schema, its management commands run the worker and the migrations."""
from __future__ import annotations

from django.apps import AppConfig


class CaravelConfig(AppConfig):  # type: ignore[misc]
    name = "caravel_lite.contrib.django"
    label = "caravel_lite"
    verbose_name = "caravel_lite"
