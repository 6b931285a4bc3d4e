"""A worker that dies holding a task: its lease expires and the job is retried, or,
with its attempts used up, FAILED with an error that says why."""
from __future__ import annotations

from datetime import timedelta

from caravel_lite import QueueOptions
from caravel_lite.queue import DatabaseQueue
from caravel_lite.testing import ManualClock


def test_a_task_whose_worker_died_is_failed_with_the_reason(django_backend):
    from caravel_lite.contrib.django import compat
    from caravel_lite.contrib.django.contract import tasks
    from caravel_lite.contrib.django.results import RecordedFailure

    result = tasks.add.using(backend=django_backend.alias).enqueue(1, 2)
    clock = ManualClock()
    db = django_backend.open_database()
    try:
        dying = DatabaseQueue(db, django_backend.tasks.jobs,
                              QueueOptions(lease_duration=timedelta(seconds=1)), clock=clock)
        assert dying.claim("default") is not None  # then the worker is killed
        result.refresh()
        assert result.status == compat.TaskResultStatus.RUNNING
        assert result.attempts == 1 and result.started_at is not None
        clock.advance(timedelta(seconds=2))
        assert dying.reclaim_expired("default") == 1  # MAX_ATTEMPTS is 1 here
    finally:
        db.close()
    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    assert [error.exception_class for error in result.errors] == [RecordedFailure]
    assert "attempts_exhausted" in result.errors[0].traceback  # its lease ran out
    assert result.finished_at is not None
