"""Which ``@task`` functions may run: a registry built once, at start, from the
modules the project names (``OPTIONS["TASK_MODULES"]``) or, by default, the ``tasks``
module of every installed app. A stored job is resolved only through it: its wire
name is looked up here, never imported, so a name that is not registered fails as
``UNKNOWN_JOB_TYPE`` (caravel_lite's worker does that), as for any caravel_lite job.

Each task becomes one caravel_lite job type: a dataclass of its call (``args``,
``kwargs`` and the Django priority it was enqueued with) under the wire name
``<module path of the function, lowercased>``.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
from datetime import datetime
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Protocol, Sequence, Tuple

from django.apps import apps
from django.core.exceptions import ImproperlyConfigured

from caravel_lite import validation
from caravel_lite.contrib.django import compat
from caravel_lite.errors import InvalidField
from caravel_lite.registry import JobRegistry

__all__ = ["TaskRegistry", "RegisteredTask", "discover", "default_modules", "wire_name_of"]



class Runner(Protocol):
    """Runs one job of a task: (task, call, job context) -> the JSON-normalised return
    value (``arun`` for ``async def`` tasks)."""

    def run(self, task: Any, call: Any, ctx: Any) -> Any: ...

    def arun(self, task: Any, call: Any, ctx: Any) -> Awaitable[Any]: ...


@dataclasses.dataclass(frozen=True)
class RegisteredTask:
    wire_name: str
    task: Any  # the Task object found in its module
    job_type: type

    def call_of(self, args: List[Any], kwargs: Dict[str, Any], priority: int,
                run_after: Optional[datetime]) -> Any:
        """The job that stores one call of this task."""
        return self.job_type(args=args, kwargs=kwargs, priority=priority, run_after=run_after)


def wire_name_of(task: Any) -> str:
    """``myapp.tasks.send_welcome``: the function's module path, lowercased (wire
    names are lowercase); ``InvalidField("wire_name")`` when it cannot be one."""
    return validation.check_wire_name(str(task.module_path).lower())


def default_modules() -> List[str]:
    """``<app>.tasks`` of every installed app that has one, in INSTALLED_APPS order."""
    found = []
    for config in apps.get_app_configs():
        name = f"{config.name}.tasks"
        try:
            if importlib.util.find_spec(name) is not None:
                found.append(name)
        except ModuleNotFoundError:
            continue
    return found


def discover(modules: Iterable[str]) -> List[Any]:
    """The Task objects defined at module level in ``modules`` (imported now), each
    once, in module then attribute order. A task re-exported by another module is
    found where its function is defined."""
    tasks: Dict[str, Any] = {}
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                raise ImproperlyConfigured(f"TASK_MODULES: no module named {name!r}") from None
            raise
        for value in vars(module).values():
            if isinstance(value, compat.Task):
                tasks.setdefault(value.module_path, value)
    return list(tasks.values())


def _job_type(wire_name: str) -> type:
    # One dataclass per task: caravel_lite's registry maps one type to one wire name.
    # The fields are what the payload codec stores as JSON values.
    cls = dataclasses.make_dataclass(
        "TaskCall_" + wire_name.replace(".", "_").replace("-", "_"),
        [("args", List[Any]), ("kwargs", Dict[str, Any]), ("priority", int),
         ("run_after", Optional[datetime], dataclasses.field(default=None))],
        frozen=True)
    cls.__module__ = __name__
    return cls


class TaskRegistry:
    """The project's tasks, each registered in one caravel_lite :class:`JobRegistry`
    (``jobs``) whose handlers run them through ``runner``."""

    def __init__(self, tasks: Sequence[Any], runner: Runner,
                 register: Callable[[JobRegistry, str, type, Callable[..., Any]], None]
                 ) -> None:
        self.jobs = JobRegistry()
        self._by_path: Dict[str, RegisteredTask] = {}
        self._by_wire: Dict[str, RegisteredTask] = {}
        for task in tasks:
            try:
                wire = wire_name_of(task)
            except InvalidField as exc:
                raise ImproperlyConfigured(f"task {task.module_path}: {exc}") from None
            if wire in self._by_wire:
                raise ImproperlyConfigured(
                    f"tasks {self._by_wire[wire].task.module_path} and {task.module_path} "
                    f"have one wire name {wire!r} (names are lowercased): rename one")
            entry = RegisteredTask(wire, task, _job_type(wire))
            register(self.jobs, wire, entry.job_type, _handler(entry, runner))
            self._by_path[task.module_path] = entry
            self._by_wire[wire] = entry

    def of_task(self, task: Any) -> RegisteredTask:
        """The registration of ``task`` (or of a ``.using()`` copy of it); InvalidTask
        when its function was not found in the registered modules."""
        entry = self._by_path.get(task.module_path)
        if entry is None or entry.task.func is not task.func:
            raise compat.InvalidTask(
                f"task {task.module_path} is not registered with this backend: define it in "
                f"an installed app's tasks module or list its module in "
                f"OPTIONS['TASK_MODULES']")
        return entry

    def of_wire_name(self, wire_name: str) -> Optional[RegisteredTask]:
        return self._by_wire.get(wire_name)

    def paths(self) -> Tuple[str, ...]:
        return tuple(sorted(self._by_path))


def _handler(entry: RegisteredTask, runner: Runner) -> Callable[..., Any]:
    # caravel_lite's worker runs an ``async def`` handler on its event loop.
    if inspect.iscoroutinefunction(entry.task.func):
        async def run_async(call: Any, ctx: Any) -> Any:
            return await runner.arun(entry.task, call, ctx)
        return run_async

    def run(call: Any, ctx: Any) -> Any:
        return runner.run(entry.task, call, ctx)
    return run
