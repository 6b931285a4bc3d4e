"""README examples run as a user runs them: the first snippet as a script, in a
directory of its own, and then once more (its SQLite file and job already there); the
testing guide's example of a job due later (docs/how-to/testing.md) as a pytest file of
a user's project."""
from __future__ import annotations

import re
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

from caravel_lite import Dispatch, QueueIdempotencyConflict
from tests.scheduler.jobs import Tick, make_queue

ROOT = Path(__file__).resolve().parents[2]


def python_snippets(page: str = "README.md") -> list:
    text = (ROOT / page).read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.S)


def first_python_snippet() -> str:
    found = python_snippets()
    assert found, "the README has no python snippet"
    return found[0]


def snippet_with(marker: str) -> str:
    (found,) = [code for code in python_snippets("docs/how-to/testing.md") if marker in code]
    return found


def test_the_first_snippet_runs_twice_and_the_second_run_finds_the_same_job(tmp_path):
    script = tmp_path / "snippet.py"
    # The snippet's last expressions print nothing as a script: show what they hold.
    script.write_text(first_python_snippet() + "\nprint(result.job_id, result.already_enqueued)\n",
                      encoding="utf-8")
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120, env={"PYTHONPATH": str(ROOT)})
        assert done.returncode == 0, done.stderr
        runs.append(done.stdout.split())
    (first_id, first_again), (second_id, second_again) = runs
    assert (first_again, second_again) == ("False", "True")
    assert first_id == second_id  # the same request, the same job
    assert (tmp_path / "app.db").exists()


def test_a_conflict_is_reported_without_the_integrity_error_it_was_found_through(db):
    queue = make_queue(db)
    dispatch = Dispatch(queue="reports", tenant_id="tenant-42", idempotency_key="request-7f3a")
    assert not queue.enqueue(Tick(1), dispatch).already_enqueued
    with pytest.raises(QueueIdempotencyConflict) as caught:
        queue.enqueue(Tick(2), dispatch)
    shown = "".join(traceback.format_exception(caught.value))
    assert "During handling of the above exception" not in shown, shown
    assert "IntegrityError" not in shown, shown


def run_as_user_tests(tmp_path: Path, code: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_user.py").write_text(code, encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "caravel_lite.testing.plugin", "test_user.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_the_testing_sections_job_due_later_waits_on_the_queues_clock(tmp_path):
    code = snippet_with("def test_a_reminder_waits_a_day")
    done = run_as_user_tests(tmp_path, code)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_a_due_time_from_the_real_clock_runs_at_once_under_the_factorys_clock(tmp_path):
    """What the testing guide warns of: the factory's clock stands years ahead of real
    time."""
    code = snippet_with("def test_a_reminder_waits_a_day")
    real_time = code.replace("queue.clock() + timedelta(days=1)",
                             "datetime.now(timezone.utc) + timedelta(days=1)")
    assert real_time != code
    real_time = "from datetime import datetime, timezone\n" + real_time
    done = run_as_user_tests(tmp_path, real_time)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "assert 1 == 0" in done.stdout  # drain ran the job a day early
