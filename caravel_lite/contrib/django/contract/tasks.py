"""The tasks the contract suite runs. ``calls`` records what ran, in order, so that a
test reads it after a worker step in the same process."""
from __future__ import annotations

from typing import Any, Dict, List

from caravel_lite.contrib.django.compat import TaskContext, task

calls: List[Any] = []


class TaskFailed(Exception):
    """What ``fail`` raises."""


@task
def add(a: int, b: int) -> int:
    calls.append(("add", a, b))
    return a + b


@task
def shaped(value: Any) -> Dict[str, Any]:
    calls.append(("shaped", value))
    return {"tuple": (1, 2), "value": value}


@task
def fail(message: str) -> None:
    calls.append(("fail", message))
    raise TaskFailed(message)


@task
def record(label: str) -> str:
    calls.append(("record", label))
    return label


@task(takes_context=True)  # type: ignore[untyped-decorator,unused-ignore]
def with_context(context: TaskContext, label: str) -> Dict[str, Any]:
    calls.append(("with_context", label, context.attempt, context.task_result.id))
    return {"attempt": context.attempt, "id": context.task_result.id}


@task
async def add_async(a: int, b: int) -> int:
    calls.append(("add_async", a, b))
    return a + b
