"""Running one stored task in caravel_lite's worker, as Django's contract describes a
task run: ``task_started`` with the result RUNNING, the function called (with a
``TaskContext`` first when ``takes_context``), its return value JSON-normalised, and
``task_finished`` with the outcome. A raised exception is raised again, so that
caravel_lite records the failed attempt (retried while attempts are left) exactly as
for any other job.

Django's database connections of the worker's threads are treated as a request's
are: ones past their age or unusable are closed before and after each task, except a
connection inside an atomic block (a test's TestCase transaction), which is left alone."""
from __future__ import annotations

import dataclasses
import traceback
from typing import Any

from django.db import connections

from caravel_lite.contrib.django import compat

__all__ = ["TaskRunner", "close_old_connections"]


def close_old_connections() -> None:
    """Django's close_old_connections, sparing a connection in an atomic block (which
    Django's would close, losing the transaction, when it differs from AUTOCOMMIT)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close_if_unusable_or_obsolete()


class TaskRunner:
    """Runs the tasks of one backend (its ``get_result`` reads the stored state)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def _started(self, call: Any, ctx: Any) -> Any:
        result = self.backend.get_result(str(ctx.job_id))
        result = dataclasses.replace(result, status=compat.TaskResultStatus.RUNNING)
        compat.task_started.send(sender=type(self.backend), task_result=result)
        return result

    def _arguments(self, task: Any, call: Any, result: Any) -> Any:
        if task.takes_context:
            return [compat.TaskContext(task_result=result), *call.args]
        return list(call.args)

    def _finished(self, result: Any, ctx: Any, error: Any = None, value: Any = None) -> None:
        if error is None:
            status = compat.TaskResultStatus.SUCCESSFUL
        elif ctx.attempt >= self.backend.config.queue_options.max_attempts:
            status = compat.TaskResultStatus.FAILED
        else:  # caravel_lite will retry it
            status = compat.TaskResultStatus.READY
        done = dataclasses.replace(result, status=status)
        object.__setattr__(done, "_return_value", value)
        if error is not None:
            done.errors.append(compat.TaskError(
                exception_class_path=f"{type(error).__module__}.{type(error).__qualname__}",
                # In-process only (the signal): the stored history keeps no frames.
                traceback="".join(traceback.format_exception(error))))
        compat.task_finished.send(sender=type(self.backend), task_result=done)

    def run(self, task: Any, call: Any, ctx: Any) -> Any:
        close_old_connections()
        try:
            result = self._started(call, ctx)
            try:
                value = compat.normalize_json(
                    task.func(*self._arguments(task, call, result), **call.kwargs))
            except Exception as exc:
                self._finished(result, ctx, exc)
                raise
            self._finished(result, ctx, value=value)
            return value
        finally:
            close_old_connections()

    async def arun(self, task: Any, call: Any, ctx: Any) -> Any:
        from asgiref.sync import sync_to_async

        # Reads and signal receivers may use the ORM, which refuses the event loop.
        result = await sync_to_async(self._started)(call, ctx)
        try:
            try:
                value = compat.normalize_json(
                    await task.func(*self._arguments(task, call, result), **call.kwargs))
            except Exception as exc:
                await sync_to_async(self._finished)(result, ctx, exc)
                raise
            await sync_to_async(self._finished)(result, ctx, None, value)
            return value
        finally:
            # The connections of the thread that ran the reads, as after a request.
            await sync_to_async(close_old_connections)()
