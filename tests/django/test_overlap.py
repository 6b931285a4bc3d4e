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
    assert len(errors) == 1 and "queue 'other'" in errors[0].msg
    errors = _errors({"a": _entry([], [CONTRACT]), "b": _entry([], [TASKAPP])})
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


def _at(url: Optional[str] = None, database: Optional[str] = None) -> Any:
    from types import SimpleNamespace
    return SimpleNamespace(config=SimpleNamespace(database_url=url, database=database))


@pytest.mark.parametrize("one, other", [
    ("postgresql://postgres@localhost/app", "postgres://postgres@127.0.0.1:5432/app"),
    ("mysql://root@[::1]:3306/app", "mysql://root@localhost/app"),
    ("sqlite:///queue.sqlite3", "sqlite:///./queue.sqlite3"),
], ids=["postgres-spellings", "mysql-spellings", "sqlite-relative-paths"])
def test_one_database_spelled_two_ways_is_one_place(project, one, other):
    from caravel_lite.contrib.django.overlap import _place
    assert _place(_at(one)) == _place(_at(other))
    assert _place(_at(one)) != _place(_at(one.replace("app", "other").replace(
        "queue.sqlite3", "other.sqlite3")))


def test_a_django_database_and_a_url_of_the_same_database_overlap(project):
    # Whatever engine the project's default database has here: its URL written out.
    from caravel_lite.contrib.django.databases import url_of
    url = url_of("default")
    assert len(_errors({"a": _entry(["default"], [CONTRACT]),
                        "b": _entry(["default"], [TASKAPP], DATABASE_URL=url)})) == 1


def test_an_entry_that_cannot_be_built_does_not_stop_the_check_or_the_worker(project):
    from django.test import override_settings

    from caravel_lite.contrib.django.management.commands.caravel_worker import worker_argv
    from caravel_lite.contrib.django.overlap import check_overlaps

    tasks = {"default": _entry(["default"], [CONTRACT]),
             "old": {"BACKEND": "no_such_package.Backend"}}
    with override_settings(TASKS=tasks):
        assert check_overlaps() == []
        assert worker_argv(["--backend", "default"])[1].endswith("backends.default")


def test_the_worker_judges_the_queues_it_is_given(project):
    from django.core.management.base import CommandError
    from django.test import override_settings

    from caravel_lite.contrib.django.management.commands.caravel_worker import worker_argv

    # Apart by QUEUES, but a worker of "b" told to serve "default" would claim a's jobs.
    tasks = {"a": _entry(["default"], [CONTRACT]), "b": _entry([], [TASKAPP])}
    with override_settings(TASKS=tasks):
        with pytest.raises(CommandError, match="UNKNOWN_JOB_TYPE"):
            worker_argv(["--backend", "b", "--queue", "default"])
    tasks = {"a": _entry(["default"], [CONTRACT]), "b": _entry(["mail"], [TASKAPP])}
    with override_settings(TASKS=tasks):
        assert worker_argv(["--backend", "b"])[-2:] == ["--queue", "mail"]
        with pytest.raises(CommandError, match="does not list queue"):
            worker_argv(["--backend", "b", "--queue=default"])


def test_djangos_own_options_and_a_separating_dash_dash_are_not_the_workers(project):
    from django.test import override_settings

    from caravel_lite.contrib.django.management.commands.caravel_worker import worker_argv

    with override_settings(TASKS={"default": _entry(["default"], [CONTRACT])}):
        argv = worker_argv(["--skip-checks", "--verbosity", "0", "--no-color", "--",
                            "--concurrency", "2"])
    assert argv[2:] == ["--concurrency", "2", "--queue", "default"]
