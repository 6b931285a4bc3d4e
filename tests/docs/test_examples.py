"""Every code example of the documentation runs (tests/docs/examples.py says how a page
marks the few that cannot), each page in a process and a directory of its own, on
SQLite."""
from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest

from tests.docs.examples import ROOT, examples, pages

WITH_EXAMPLES = [page for page in pages() if examples(page.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("page", WITH_EXAMPLES,
                         ids=[str(p.relative_to(ROOT)) for p in WITH_EXAMPLES])
def test_the_pages_examples_run(page, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CARAVEL_DATABASE_URL", None)  # the examples name their own databases
    done = subprocess.run([sys.executable, "-m", "tests.docs.run_page",
                           str(page.relative_to(ROOT))], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    for line in done.stdout.splitlines():
        if line.startswith("skipped: "):
            warnings.warn(line)  # each skipped example and its reason, in pytest's summary


def test_a_failing_example_fails_its_page_and_names_its_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n```python\nx = 1\n```\n\nText.\n\n```python\n"
                    "assert x == 2, 'wrong'\n```\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "tests.docs.run_page", str(page)],
                          cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"FAILED: {page}, line 10" in done.stdout
    assert f'File "{page}", line 10' in done.stdout and "AssertionError: wrong" in done.stdout


def test_a_skipped_example_must_say_why():
    with pytest.raises(ValueError, match="needs a reason"):
        examples("<!-- example: skip -->\n```python\n1/0\n```\n")


def test_every_python_block_is_run_unless_marked():
    page = ("text\n```python\nx = 1\n```\n<!-- example: skip needs a server -->\n```python\n"
            "1/0\n```\n```sh\nrm -rf /\n```\n<!-- example: setup\ny = 2\n-->\n")
    assert [(e.kind, e.code, e.argument) for e in examples(page)] == [
        ("run", "x = 1\n", ""), ("skip", "1/0\n", "needs a server"), ("setup", "y = 2\n", "")]
