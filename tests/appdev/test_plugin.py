"""The pytest plugin, as a user meets it: a small test project run by pytest in a
virtualenv where caravel_lite is pip-installed, so that the fixtures come from the
``pytest11`` entry point and nothing else."""
from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest


PROJECT_TEST = textwrap.dedent('''
    from dataclasses import dataclass
    from datetime import timedelta

    import caravel_lite
    from caravel_lite import Dispatch, JobContext, JobRegistry, QueueOptions
    from caravel_lite.testing import InlineQueue, ManualClock, assert_enqueued, drain

    registry = JobRegistry()
    seen = []


    @dataclass(frozen=True)
    class Greet:
        name: str


    @registry.job("app.greet.v1", Greet)
    def greet(job: Greet, ctx: JobContext) -> None:
        seen.append((job.name, ctx.attempt))
        if job.name == "flaky" and ctx.attempt == 1:
            raise RuntimeError("first attempt fails")


    def test_installed_copy_is_used():
        assert "site-packages" in caravel_lite.__file__


    def test_fixtures(caravel_db, caravel_db_url, caravel_clock, caravel_queue_factory):
        assert caravel_db_url.startswith("sqlite:///")
        assert isinstance(caravel_clock, ManualClock)
        queue = caravel_queue_factory(registry, QueueOptions(retry_delay=timedelta(seconds=2)))
        assert queue.db is caravel_db and queue.clock is caravel_clock
        queue.enqueue(Greet("ada"), Dispatch("hello", tenant_id="t"))
        queue.enqueue(Greet("flaky"), Dispatch("hello", tenant_id="t"))
        assert_enqueued(queue, "hello", Greet, count=2)
        result = drain(queue, "hello", clock=caravel_clock)
        assert (result.completed, result.retried) == (2, 1)
        assert result.advanced == timedelta(seconds=2)


    def test_each_test_gets_a_fresh_database(caravel_queue_factory):
        queue = caravel_queue_factory(registry)
        assert queue.counts("hello").completed == 0


    def test_inline_queue(caravel_queue_factory):
        queue = caravel_queue_factory(registry, inline=True)
        assert isinstance(queue, InlineQueue)
        queue.enqueue(Greet("bob"), Dispatch("hello", tenant_id="t"))
        assert ("bob", 1) in seen
''')


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "test_app.py").write_text(PROJECT_TEST)
    return tmp_path


def run_pytest(python: Path, project: Path, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # only the installed copy may be importable
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *extra], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_fixtures_come_from_the_installed_entry_point(installed_python, project):
    done = run_pytest(installed_python, project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout


def test_without_the_plugin_the_fixtures_are_missing(installed_python, project):
    done = run_pytest(installed_python, project, "-p", "no:caravel_lite.testing.plugin")
    assert done.returncode != 0
    assert "fixture 'caravel_db' not found" in done.stdout


def test_naming_the_plugin_as_well_loads_it_once(installed_python, project):
    # What this repository's setup.cfg does (addopts), where caravel_lite is installed.
    done = run_pytest(installed_python, project, "-p", "caravel_lite.testing.plugin")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
