"""``CaravelBackend``: a Django tasks backend (``django.tasks`` on Django 6.x, the
``django_tasks`` backport on Django 4.2-5.2) that stores tasks as caravel_lite jobs.

Set it in ``settings.TASKS``::

    TASKS = {"default": {"BACKEND": "caravel_lite.contrib.django.CaravelBackend",
                         "QUEUES": ["default", "emails"],
                         "OPTIONS": {"DATABASE": "default"}}}

and run ``python manage.py caravel_worker``. See :mod:`caravel_lite.contrib.django.config`
for the options and the README ("Using caravel_lite with Django") for how each
``TaskResult`` field maps.
"""
from __future__ import annotations

import threading
import uuid
from datetime import datetime
from typing import Any, Dict, List, Optional, Sequence

import peewee
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from caravel_lite import codec
from caravel_lite.admin import QueueAdmin
from caravel_lite.contrib.django import compat, databases, results
from caravel_lite.contrib.django.config import BackendConfig
from caravel_lite.contrib.django.execution import TaskRunner
from caravel_lite.contrib.django.registry import TaskRegistry, default_modules, discover
from caravel_lite.dialect import open_database
from caravel_lite.errors import InvalidField
from caravel_lite.queue import DatabaseQueue
from caravel_lite.values import Dispatch, JobState, Priority

__all__ = ["CaravelBackend", "priority_of", "STATUS_OF"]

STATUS_OF = {JobState.PENDING: "READY", JobState.LEASED: "RUNNING",
             JobState.COMPLETED: "SUCCESSFUL", JobState.DEAD_LETTER: "FAILED"}


def priority_of(django_priority: int) -> Priority:
    """Django's -100..100 (higher runs first) onto caravel_lite's four classes (lower
    claimed first): 50..100 CRITICAL, 1..49 HIGH, 0 NORMAL, -100..-1 LOW. Within a
    class, jobs run in due-time order."""
    if django_priority >= 50:
        return Priority.CRITICAL
    if django_priority > 0:
        return Priority.HIGH
    if django_priority == 0:
        return Priority.NORMAL
    return Priority.LOW


def _local(value: Optional[datetime]) -> Optional[datetime]:
    """An aware UTC time from caravel_lite as Django shows times (naive without USE_TZ)."""
    if value is None:
        return None
    return value if settings.USE_TZ else timezone.make_naive(value)


class CaravelBackend(compat.BaseTaskBackend):  # type: ignore[misc]
    """Tasks stored as caravel_lite jobs: durable, leased, retried on failure
    (``MAX_ATTEMPTS``), run by ``manage.py caravel_worker``.

    ``enqueue`` on a backend whose ``DATABASE`` is a Django database writes through
    Django's connection: inside ``transaction.atomic()`` the job commits or rolls back
    with the caller's transaction; outside one it is committed before ``enqueue``
    returns. A lost reply (the connection dropped around the commit) reaches the caller
    as Django's database error, the job perhaps committed, as for the caller's own
    rows. With ``DATABASE_URL`` the job is committed on the queue's own connection
    before ``enqueue`` returns (the caller's transaction does not include it: use
    ``transaction.on_commit`` to enqueue after it)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: Dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.config = BackendConfig.read(alias, self.options, sorted(self.queues))
        # Reentrant: a tasks module imported while the registry is built may use it.
        self._lock = threading.RLock()
        self._tasks: Optional[TaskRegistry] = None
        self._own: Optional[DatabaseQueue] = None
        self._caller: Optional[DatabaseQueue] = None

    # -- what the backend is built from, on first use ---------------------------------

    @property
    def tasks(self) -> TaskRegistry:
        """The registered tasks (built once, from TASK_MODULES or the installed apps)."""
        with self._lock:
            if self._tasks is None:
                modules = (self.config.task_modules if self.config.task_modules is not None
                           else default_modules())
                self._tasks = TaskRegistry(discover(modules), TaskRunner(self),
                                           results.register)
            return self._tasks

    def open_database(self) -> peewee.Database:
        """A new Peewee database of caravel_lite's own on the backend's database."""
        if self.config.database_url is not None:
            return open_database(self.config.database_url)
        assert self.config.database is not None
        return databases.open_own(self.config.database)

    def queue(self, db: Optional[peewee.Database] = None) -> DatabaseQueue:
        """A DatabaseQueue of this backend's tasks on ``db`` (default: one database of
        its own, opened once): what the worker and the dashboard use."""
        if db is not None:
            return DatabaseQueue(db, self.tasks.jobs, self.config.queue_options)
        tasks = self.tasks
        with self._lock:
            if self._own is None:
                self._own = DatabaseQueue(self.open_database(), tasks.jobs,
                                          self.config.queue_options)
            return self._own

    def _caller_queue(self) -> DatabaseQueue:
        """The queue enqueue and get_result use: on Django's connection when the
        backend's database is Django's."""
        if self.config.database is None:
            return self.queue()
        tasks = self.tasks
        with self._lock:
            if self._caller is None:
                self._caller = DatabaseQueue(databases.sharing(self.config.database),
                                             tasks.jobs, self.config.queue_options)
            return self._caller

    # -- the contract ------------------------------------------------------------------

    def enqueue(self, task: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        self.validate_task(task)
        entry = self.tasks.of_task(task)
        args_json: List[Any] = compat.normalize_json(list(args))
        kwargs_json: Dict[str, Any] = compat.normalize_json(dict(kwargs))
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)  # USE_TZ off: the local time
        queue = self._caller_queue()
        dispatch = Dispatch(queue=task.queue_name, tenant_id=self.config.tenant_id,
                            not_before=run_after, priority=priority_of(task.priority))
        call = entry.call_of(args_json, kwargs_json, task.priority, run_after)
        enqueued_at = timezone.now()
        try:
            if self.config.database is not None:
                with transaction.atomic(using=self.config.database):
                    job = queue.enqueue(call, dispatch)
            else:
                job = queue.enqueue(call, dispatch)
        except InvalidField as exc:  # arguments caravel_lite cannot store
            raise compat.InvalidTask(str(exc)) from exc
        result = compat.TaskResult(
            task=task, id=str(job.job_id), status=compat.TaskResultStatus.READY,
            enqueued_at=enqueued_at, started_at=None, finished_at=None,
            last_attempted_at=None, args=args_json, kwargs=kwargs_json, backend=self.alias,
            errors=[], worker_ids=[])
        compat.task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        try:
            uuid.UUID(str(result_id))
        except ValueError:
            raise compat.TaskResultDoesNotExist(result_id) from None
        queue = self._caller_queue()
        recorded = results.read(queue, QueueAdmin(queue.db), str(result_id))
        if recorded is None or recorded.detail.tenant_id != self.config.tenant_id or (
                self.queues and recorded.detail.queue_name not in self.queues):
            raise compat.TaskResultDoesNotExist(result_id)
        detail = recorded.detail
        entry = self.tasks.of_wire_name(detail.wire_name)
        if entry is None:
            raise compat.TaskResultDoesNotExist(
                f"{result_id}: its task {detail.wire_name!r} is not registered here")
        stored = codec.decode(entry.job_type, detail.payload or "")
        task = entry.task.using(priority=stored.priority, queue_name=detail.queue_name,
                                run_after=_local(stored.run_after), backend=self.alias)
        # A state of a later caravel_lite (a cancelled job) ended the task: FAILED.
        status = compat.TaskResultStatus(STATUS_OF.get(detail.state, "FAILED"))
        result = compat.TaskResult(
            task=task, id=str(detail.job_id), status=status,
            enqueued_at=_local(detail.enqueued_at), started_at=_local(recorded.started_at),
            finished_at=_local(detail.finished_at) if status in (
                compat.TaskResultStatus.SUCCESSFUL, compat.TaskResultStatus.FAILED) else None,
            last_attempted_at=_local(recorded.started_at), args=stored.args,
            kwargs=stored.kwargs, backend=self.alias,
            errors=[compat.TaskError(exception_class_path=path, traceback=text)
                    for path, text in recorded.errors],
            worker_ids=list(recorded.worker_ids))
        object.__setattr__(result, "_return_value", recorded.return_value)
        return result
