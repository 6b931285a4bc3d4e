"""The README's first snippet, run as a new user runs it: as a script, in a directory
of its own, and then once more (its SQLite file and job already there)."""
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


def first_python_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found is not None, "the README has no python snippet"
    return found.group(1)


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
