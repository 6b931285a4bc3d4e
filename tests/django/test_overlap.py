"""Two Caravel backends that would dead-letter each other's jobs are refused (#29): the
system check caravel_lite.E001 and ``manage.py caravel_worker``."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

BACKEND = "caravel_lite.contrib.django.CaravelBackend"
CONTRACT = "caravel_lite.contrib.django.contract.tasks"
TASKAPP = "tests.django.taskapp.tasks"


def _entry(queues: List[str], modules: Optional[List[str]], **options: Any) -> Dict[str, Any]:
    if modules is not None:
        options["TASK_MODULES"] = modules
    return {"BACKEND": BACKEND, "QUEUES": queues, "OPTIONS": options}


def _errors(tasks: Dict[str, Any]) -> List[Any]:
    from django.core import checks
    from django.test import override_settings

    with override_settings(TASKS=tasks):
        return [message for message in checks.run_checks()
                if message.id == "caravel_lite.E001"]


def test_the_test_project_passes_the_check(project):
    assert _errors(_project_tasks()) == []


def _project_tasks() -> Dict[str, Any]:
    from django.conf import settings
    return dict(settings.TASKS)


def test_a_shared_database_and_queue_with_other_task_modules_is_refused(project):
    errors = _errors({"default": _entry(["default"], [CONTRACT]),
                      "mail": _entry(["default", "mail"], [TASKAPP])})
    assert len(errors) == 1  # one message per pair, not one from each side
    text = errors[0].msg
    assert "TASKS['default']" in text and "TASKS['mail']" in text
    assert "'default'" in text and "UNKNOWN_JOB_TYPE" in text
    assert "QUEUES" in errors[0].hint


def test_modules_found_by_discovery_count_as_the_installed_apps_tasks(project):
    # No TASK_MODULES: <app>.tasks of every installed app, which is not [CONTRACT].
    assert len(_errors({"a": _entry(["default"], None),
                        "b": _entry(["default"], [CONTRACT])})) == 1
    from caravel_lite.contrib.django.registry import default_modules
    assert _errors({"a": _entry(["default"], None),
                    "b": _entry(["default"], list(reversed(default_modules())))}) == []


def test_a_backend_without_queues_shares_every_queue_name(project):
    errors = _errors({"a": _entry([], [CONTRACT]), "b": _entry(["other"], [TASKAPP])})
    assert len(errors) == 1 and "every queue name" in errors[0].msg


@pytest.mark.parametrize("tasks", [
    # the same task modules, in any order: each worker runs the other's jobs
    {"a": _entry(["default"], [CONTRACT, TASKAPP]), "b": _entry(["default"], [TASKAPP, CONTRACT])},
    # queue names of their own
    {"a": _entry(["default"], [CONTRACT]), "b": _entry(["mail"], [TASKAPP])},
    # separate databases
    {"a": _entry(["default"], [CONTRACT], DATABASE_URL="sqlite:///one.sqlite3"),
     "b": _entry(["default"], [TASKAPP], DATABASE_URL="sqlite:///two.sqlite3")},
    {"a": _entry(["default"], [CONTRACT]),
     "b": _entry(["default"], [TASKAPP], DATABASE_URL="sqlite:///two.sqlite3")},
], ids=["same-modules", "own-queues", "own-urls", "django-and-url"])
def test_backends_that_cannot_fail_each_others_jobs_pass(project, tasks):
    assert _errors(tasks) == []


def test_the_worker_refuses_such_a_backend_even_when_checks_are_skipped(project):
    from django.core.management.base import CommandError
    from django.test import override_settings

    from caravel_lite.contrib.django.management.commands.caravel_worker import worker_argv

    tasks = {"default": _entry(["default"], [CONTRACT]), "mail": _entry(["default"], [TASKAPP])}
    with override_settings(TASKS=tasks):
        for alias in tasks:
            with pytest.raises(CommandError, match="UNKNOWN_JOB_TYPE"):
                worker_argv(["--backend", alias])
    with override_settings(TASKS={"default": tasks["default"]}):
        assert worker_argv(["--backend", "default"])[1].endswith("backends.default")
