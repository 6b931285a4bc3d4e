"""manage.py caravel_migrate and caravel_worker's translation to caravel-lite worker."""
from __future__ import annotations

import io

import pytest


def test_caravel_migrate_reports_each_backend(project):
    from django.core.management import call_command

    out = io.StringIO()
    call_command("caravel_migrate", stdout=out)
    lines = out.getvalue().splitlines()
    assert "caravel_separate: up to date" in lines
    assert all(line.endswith("up to date") for line in lines), lines


def test_caravel_migrate_refuses_a_backend_that_is_not_caravels(project):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="no Caravel backend 'immediate'"):
        call_command("caravel_migrate", backend="immediate")


def test_the_worker_serves_the_backends_queues_unless_told(project):
    from caravel_lite.contrib.django.management.commands.caravel_worker import worker_argv

    target = "caravel_lite.contrib.django.worker:backends.caravel_separate"
    assert worker_argv(["--backend", "caravel_separate", "--concurrency", "2"]) == [
        "worker", target, "--concurrency", "2", "--queue", "default", "--queue", "other"]
    assert worker_argv(["--settings=x.y", "--backend=caravel_separate", "--queue", "other"]) == [
        "worker", target, "--queue", "other"]


def test_the_worker_refuses_a_backend_that_is_not_caravels(project):
    from django.core.management import CommandError

    from caravel_lite.contrib.django.management.commands.caravel_worker import worker_argv

    with pytest.raises(CommandError, match="not a CaravelBackend"):
        worker_argv(["--backend", "immediate"])


def test_the_worker_names_an_unknown_backend(project):
    from django.core.management import CommandError

    from caravel_lite.contrib.django.management.commands.caravel_worker import worker_argv

    with pytest.raises(CommandError, match="no backend 'nope'"):
        worker_argv(["--backend", "nope"])
