"""The one place that knows there are two Django task frameworks: ``django.tasks``
(Django 6.x) and the ``django_tasks`` backport (Django 4.2-5.2). They share one
contract; every other module of this package imports its names from here."""
from __future__ import annotations

from typing import Any, Callable

try:  # Django 6.x ships the framework
    from django.tasks import base as _base
    from django.tasks import exceptions as _exceptions
    from django.tasks import signals as _signals
    from django.tasks import default_task_backend, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.utils.json import normalize_json
    FRAMEWORK = "django.tasks"
except ImportError:  # the backport package
    from django_tasks import base as _base  # type: ignore[no-redef,unused-ignore]
    from django_tasks import exceptions as _exceptions  # type: ignore[no-redef,unused-ignore]
    from django_tasks import signals as _signals  # type: ignore[no-redef,unused-ignore]
    from django_tasks import default_task_backend, task_backends  # type: ignore[no-redef,attr-defined,unused-ignore]
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,unused-ignore]
    from django_tasks.utils import normalize_json  # type: ignore[no-redef,unused-ignore]
    FRAMEWORK = "django_tasks"

task: Callable[..., Any] = _base.task
Task: Any = _base.Task
TaskResult: Any = _base.TaskResult
TaskResultStatus: Any = _base.TaskResultStatus
TaskError: Any = _base.TaskError
TaskContext: Any = _base.TaskContext
# The backport names its exceptions with an "Error" suffix.
InvalidTask: Any = getattr(_exceptions, "InvalidTask", None) or _exceptions.InvalidTaskError
TaskResultDoesNotExist: Any = _exceptions.TaskResultDoesNotExist
task_enqueued: Any = _signals.task_enqueued
task_started: Any = _signals.task_started
task_finished: Any = _signals.task_finished

__all__ = ["FRAMEWORK", "BaseTaskBackend", "task", "Task", "TaskResult", "TaskResultStatus",
           "TaskError", "TaskContext", "InvalidTask", "TaskResultDoesNotExist",
           "task_enqueued", "task_started", "task_finished", "task_backends",
           "default_task_backend",
           "normalize_json"]
