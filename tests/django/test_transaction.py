"""enqueue() inside the caller's transaction.atomic(): the job commits or rolls back
with the caller's work, which a second connection proves (it must not see the job
before the commit)."""
from __future__ import annotations

from typing import Any

import pytest

from caravel_lite.contrib.django import databases
from tests.django.conftest import empty


def seen_elsewhere(backend: Any, job_id: str) -> bool:
    """Whether a connection other than Django's sees the job committed."""
    db = backend.open_database()
    try:
        return db.execute_sql("SELECT COUNT(*) FROM caravel_jobs WHERE id = " + db.param,
                              (job_id,)).fetchone()[0] == 1
    finally:
        db.close()


def test_the_job_commits_with_the_callers_transaction(django_backend):
    from django.db import transaction

    from caravel_lite.contrib.django.contract import tasks

    alias = django_backend.config.database
    with transaction.atomic(using=alias):
        result = tasks.add.using(backend=django_backend.alias).enqueue(1, 2)
        assert not seen_elsewhere(django_backend, result.id)
        # Django's own connection, inside the transaction, sees it already.
        assert django_backend.get_result(result.id).id == result.id
    assert seen_elsewhere(django_backend, result.id)


def test_the_job_rolls_back_with_the_callers_transaction(django_backend):
    from django.db import transaction

    from caravel_lite.contrib.django import compat
    from caravel_lite.contrib.django.contract import tasks

    class Abandon(Exception):
        pass

    alias = django_backend.config.database
    with pytest.raises(Abandon):
        with transaction.atomic(using=alias):
            result = tasks.add.using(backend=django_backend.alias).enqueue(1, 2)
            raise Abandon
    assert not seen_elsewhere(django_backend, result.id)
    with pytest.raises(compat.TaskResultDoesNotExist):
        django_backend.get_result(result.id)


def test_an_inner_atomic_block_rolled_back_takes_its_job_with_it(django_backend):
    from django.db import transaction

    from caravel_lite.contrib.django.contract import tasks

    alias = django_backend.config.database
    task = tasks.record.using(backend=django_backend.alias)
    with transaction.atomic(using=alias):
        kept = task.enqueue("kept")
        try:
            with transaction.atomic(using=alias):
                dropped = task.enqueue("dropped")
                raise RuntimeError
        except RuntimeError:
            pass
    assert seen_elsewhere(django_backend, kept.id)
    assert not seen_elsewhere(django_backend, dropped.id)


def test_outside_a_transaction_the_job_is_committed_on_return(django_backend):
    from caravel_lite.contrib.django.contract import tasks

    result = tasks.add.using(backend=django_backend.alias).enqueue(3, 4)
    assert seen_elsewhere(django_backend, result.id)


def test_a_queue_in_another_database_commits_on_its_own(project):
    from django.db import transaction

    from caravel_lite.contrib.django.compat import task_backends
    from caravel_lite.contrib.django.contract import tasks

    backend = task_backends["caravel_separate"]
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            result = tasks.add.using(backend="caravel_separate").enqueue(1, 1)
            raise RuntimeError
    # Not Django's database: the caller's rollback does not reach it
    # (docs/how-to/django.md shows transaction.on_commit for this case).
    assert seen_elsewhere(backend, result.id)


def test_an_in_memory_sqlite_database_is_refused_with_the_fix(project, monkeypatch):
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connections

    settings = dict(connections["default"].settings_dict,
                    ENGINE="django.db.backends.sqlite3", NAME=":memory:")
    monkeypatch.setattr(connections["default"], "settings_dict", settings)
    monkeypatch.setattr(connections["default"], "vendor", "sqlite")
    with pytest.raises(ImproperlyConfigured, match="TEST"):
        databases.url_of("default")


def test_running_tasks_inside_an_atomic_block_keeps_its_connection(project):
    from django.db import connection, transaction

    from caravel_lite.contrib.django import compat
    from caravel_lite.contrib.django.compat import task_backends
    from caravel_lite.contrib.django.contract import tasks
    from caravel_lite.contrib.django.testing import run_tasks

    empty(task_backends["caravel_separate"])  # what other tests left there
    # A TestCase's transaction: the worker must not close the connection holding it
    # (Django's own close_old_connections would, autocommit being off).
    with transaction.atomic():
        connection.ensure_connection()
        held = connection.connection
        result = tasks.add.using(backend="caravel_separate").enqueue(1, 2)
        assert run_tasks("caravel_separate").completed == 1
        assert connection.connection is held and not connection.needs_rollback
        with connection.cursor() as cursor:  # still open, the transaction still there
            cursor.execute("SELECT 1")
    result.refresh()
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
