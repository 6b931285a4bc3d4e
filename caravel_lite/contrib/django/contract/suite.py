"""The contract suite: what Django's documentation says of every tasks backend, as
pytest tests over a :class:`~caravel_lite.contrib.django.contract.Harness`."""
from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any, Iterator, List, Tuple

import pytest
from django.utils import timezone

from caravel_lite.contrib.django import compat
from caravel_lite.contrib.django.contract.harness import Harness

__all__ = ["TaskBackendContract"]


class TaskBackendContract:
    """Subclass it (``class TestMyBackend(TaskBackendContract)``) and override the
    ``harness`` fixture."""

    @property
    def tasks(self) -> Any:
        # Imported once Django is configured: @task needs the settings.
        from caravel_lite.contrib.django.contract import tasks
        return tasks

    @pytest.fixture
    def harness(self) -> Harness:
        raise NotImplementedError("give the suite a harness fixture")

    @pytest.fixture(autouse=True)
    def _clean(self, harness: Harness) -> Iterator[None]:
        harness.clear()
        self.tasks.calls.clear()
        yield
        self.tasks.calls.clear()

    # -- helpers ---------------------------------------------------------------------------

    def using(self, harness: Harness, task: Any, **changes: Any) -> Any:
        return task.using(backend=harness.alias, **changes)

    def latest(self, harness: Harness, result: Any) -> Any:
        """The result as the backend now has it: refreshed where it stores results, else
        the object an inline backend filled in."""
        if harness.backend.supports_get_result:
            result.refresh()
        return result

    def run(self, harness: Harness, task: Any, *args: Any, **kwargs: Any) -> Any:
        result = self.using(harness, task).enqueue(*args, **kwargs)
        harness.work()
        return self.latest(harness, result)

    def needs(self, harness: Harness, flag: str) -> None:
        if not getattr(harness.backend, flag):
            pytest.skip(f"the backend does not set {flag}")

    def queued(self, harness: Harness) -> None:
        if harness.runs_inline:
            pytest.skip("the backend runs tasks inside enqueue()")

    # -- enqueue ---------------------------------------------------------------------------

    def test_enqueue_answers_ready_with_an_id_of_at_most_64_characters(self, harness: Harness) -> None:
        self.queued(harness)
        result = self.using(harness, self.tasks.add).enqueue(1, 2)
        assert result.status == compat.TaskResultStatus.READY
        assert isinstance(result.id, str) and 1 <= len(result.id) <= 64
        assert result.args == [1, 2] and result.kwargs == {}
        assert result.backend == harness.alias
        assert not result.is_finished and result.attempts == 0
        with pytest.raises(ValueError):
            result.return_value  # noqa: B018 (not finished yet)
        assert self.tasks.calls == []

    def test_ids_are_unique(self, harness: Harness) -> None:
        ids = {self.using(harness, self.tasks.record).enqueue(str(i)).id for i in range(5)}
        assert len(ids) == 5

    def test_get_result_round_trip_and_refresh(self, harness: Harness) -> None:
        self.needs(harness, "supports_get_result")
        enqueued = self.using(harness, self.tasks.add).enqueue(2, b=3)
        found = harness.backend.get_result(enqueued.id)
        assert found.id == enqueued.id
        assert found.task.func is self.tasks.add.func
        assert found.args == [2] and found.kwargs == {"b": 3}
        assert found.status == enqueued.status
        assert self.tasks.add.using(backend=harness.alias).get_result(enqueued.id).id == enqueued.id
        harness.work()
        enqueued.refresh()
        assert enqueued.status == compat.TaskResultStatus.SUCCESSFUL
        assert enqueued.finished_at is not None and enqueued.enqueued_at is not None
        assert enqueued.enqueued_at <= enqueued.started_at <= enqueued.finished_at

    def test_an_unknown_id_raises_task_result_does_not_exist(self, harness: Harness) -> None:
        self.needs(harness, "supports_get_result")
        for unknown in ("00000000-0000-0000-0000-000000000000", "not-an-id"):
            with pytest.raises(compat.TaskResultDoesNotExist):
                harness.backend.get_result(unknown)

    # -- running ---------------------------------------------------------------------------

    def test_a_worker_step_gives_successful_with_the_json_normalised_return_value(self, harness: Harness) -> None:
        result = self.run(harness, self.tasks.shaped, {"when": "now"})
        assert result.status == compat.TaskResultStatus.SUCCESSFUL
        assert result.is_finished and result.errors == []
        assert self.tasks.calls == [("shaped", {"when": "now"})]
        assert result.return_value == {"tuple": [1, 2], "value": {"when": "now"}}, (
            "the backend did not give back the task's return value")

    def test_a_raising_task_gives_failed_with_its_errors(self, harness: Harness) -> None:
        result = self.run(harness, self.tasks.fail, "boom")
        assert result.status == compat.TaskResultStatus.FAILED
        assert result.is_finished and result.finished_at is not None
        assert [error.exception_class for error in result.errors] == [self.tasks.TaskFailed]
        assert result.errors[0].exception_class_path == (
            "caravel_lite.contrib.django.contract.tasks.TaskFailed")
        assert isinstance(result.errors[0].traceback, str)
        with pytest.raises(ValueError):
            result.return_value  # noqa: B018 (failed)

    def test_attempts_equal_the_worker_ids(self, harness: Harness) -> None:
        result = self.run(harness, self.tasks.add, 1, 1)
        assert result.attempts == len(result.worker_ids) == 1
        assert all(isinstance(worker, str) and worker for worker in result.worker_ids)

    def test_a_task_taking_context_sees_its_result_and_attempt(self, harness: Harness) -> None:
        result = self.run(harness, self.tasks.with_context, "x")
        assert self.tasks.calls == [("with_context", "x", 1, result.id)]
        assert result.status == compat.TaskResultStatus.SUCCESSFUL
        assert result.return_value == {"attempt": 1, "id": result.id}, (
            "the backend did not give back the task's return value")

    def test_run_after_holds_a_task_until_then(self, harness: Harness) -> None:
        later = timezone.now() + timedelta(hours=1)
        if not harness.backend.supports_defer:
            with pytest.raises(compat.InvalidTask):
                self.using(harness, self.tasks.record, run_after=later).enqueue("later")
            return
        result = self.using(harness, self.tasks.record, run_after=later).enqueue("later")
        harness.work()
        result = self.latest(harness, result)
        assert result.status == compat.TaskResultStatus.READY
        assert result.task.run_after == later
        assert self.tasks.calls == []

    def test_a_worker_runs_higher_priority_first(self, harness: Harness) -> None:
        self.needs(harness, "supports_priority")
        self.queued(harness)
        for priority in (-10, 0, 60, 10):
            self.using(harness, self.tasks.record, priority=priority).enqueue(str(priority))
        harness.work()
        assert [call[1] for call in self.tasks.calls] == ["60", "10", "0", "-10"]

    def test_priority_out_of_range_is_invalid(self, harness: Harness) -> None:
        for priority in (-101, 101):
            with pytest.raises(compat.InvalidTask):
                self.using(harness, self.tasks.record, priority=priority)

    def test_an_unknown_queue_raises_invalid_task(self, harness: Harness) -> None:
        with pytest.raises(compat.InvalidTask):
            self.using(harness, self.tasks.record, queue_name="no-such-queue")
        result = self.run(harness, self.using(harness, self.tasks.record, queue_name="other"), "o")
        assert result.status == compat.TaskResultStatus.SUCCESSFUL
        assert result.task.queue_name == "other"

    # -- async -----------------------------------------------------------------------------

    def test_async_variants(self, harness: Harness) -> None:
        self.needs(harness, "supports_async_task")
        backend = harness.backend

        async def scenario() -> Tuple[Any, Any]:
            enqueued = await self.using(harness, self.tasks.add_async).aenqueue(4, 5)
            return enqueued, (await backend.aget_result(enqueued.id)
                              if backend.supports_get_result else enqueued)

        enqueued, found = asyncio.run(scenario())
        assert found.id == enqueued.id
        harness.work()
        result = self.latest(harness, enqueued)
        if backend.supports_get_result:
            asyncio.run(result.arefresh())
        assert result.status == compat.TaskResultStatus.SUCCESSFUL
        assert self.tasks.calls == [("add_async", 4, 5)]
        assert result.return_value == 9, "the backend did not give back the return value"

    # -- signals ---------------------------------------------------------------------------

    def test_signals_of_enqueue_start_and_finish(self, harness: Harness) -> None:
        seen: List[Tuple[str, Any, str]] = []

        def receiver(name: str) -> Any:
            def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
                seen.append((name, sender, str(task_result.status)))
            return receive

        receivers = {signal: receiver(name) for name, signal in (
            ("enqueued", compat.task_enqueued), ("started", compat.task_started),
            ("finished", compat.task_finished))}
        for signal, receive in receivers.items():
            signal.connect(receive)
        try:
            self.run(harness, self.tasks.add, 1, 2)
            self.run(harness, self.tasks.fail, "x")
        finally:
            for signal, receive in receivers.items():
                signal.disconnect(receive)
        kind = type(harness.backend)
        assert [(name, status) for name, sender, status in seen] == [
            ("enqueued", "READY"),
            ("started", "RUNNING"), ("finished", "SUCCESSFUL"),
            ("enqueued", "READY"), ("started", "RUNNING"), ("finished", "FAILED")]
        assert {sender for _, sender, _ in seen} == {kind}
