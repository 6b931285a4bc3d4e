"""Only registered @task functions run: the registry is built at start from the
installed apps or an explicit list, and a stored name is never imported."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from caravel_lite import Dispatch, JobRegistry, QueueOptions
from caravel_lite.queue import DatabaseQueue
from caravel_lite.testing import drain
from caravel_lite.values import Failure, JobState


def test_by_default_the_tasks_modules_of_the_installed_apps_are_registered(project):
    from caravel_lite.contrib.django.backend import CaravelBackend

    backend = CaravelBackend("probe", {"QUEUES": ["default"],
                                       "OPTIONS": {"DATABASE": "default"}})
    assert backend.tasks.paths() == ("tests.django.taskapp.tasks.note",)


def test_an_explicit_list_replaces_the_discovery(django_backend):
    assert "tests.django.taskapp.tasks.note" in django_backend.tasks.paths()
    assert "caravel_lite.contrib.django.contract.tasks.add" in django_backend.tasks.paths()


def test_a_task_outside_the_registered_modules_is_refused_at_enqueue(project):
    from caravel_lite.contrib.django import compat
    from caravel_lite.contrib.django.contract import tasks

    with pytest.raises(compat.InvalidTask, match="not registered"):
        tasks.add.using(backend="probe_unlisted", queue_name="unlisted").enqueue(1, 2)


@dataclass(frozen=True)
class Smuggled:
    args: list
    kwargs: dict
    priority: int


def test_a_stored_name_that_is_not_registered_fails_unknown_job_type(django_backend):
    from caravel_lite.contrib.django import compat
    from tests.django.taskapp import tasks

    # The module path of a real, importable function: a worker that imported stored
    # paths would run it.
    name = "tests.django.taskapp.tasks.not_a_task"
    other = JobRegistry()
    other.register(name, Smuggled, lambda job, ctx: None)
    db = django_backend.open_database()
    try:
        job = DatabaseQueue(db, other, QueueOptions(max_attempts=1)).enqueue(Smuggled(["x"], {}, 0),
                                               Dispatch("default", "default"))
    finally:
        db.close()
    tasks.ran.clear()
    drain(django_backend.queue(), "default")
    status = django_backend.queue().status(job.job_id, "default", "default")
    assert status is not None and status.state is JobState.DEAD_LETTER
    assert status.last_failure is Failure.UNKNOWN_JOB_TYPE
    assert tasks.ran == []
    with pytest.raises(compat.TaskResultDoesNotExist, match="not registered"):
        django_backend.get_result(str(job.job_id))


def test_names_that_collide_once_lowercased_are_refused(project):
    from django.core.exceptions import ImproperlyConfigured

    from caravel_lite.contrib.django.registry import TaskRegistry
    from caravel_lite.contrib.django import results

    class Fake:
        def __init__(self, path):
            self.module_path = path
            self.func = lambda: None

    with pytest.raises(ImproperlyConfigured, match="lowercased"):
        TaskRegistry([Fake("app.tasks.Send"), Fake("app.tasks.send")], None, results.register)
