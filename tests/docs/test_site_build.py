"""The site builds with mkdocs in strict mode (any warning fails: a broken link, a
page missing from the nav, a docstring mkdocstrings cannot render), offline, from this
checkout."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.databases import in_ci
from tests.docs.examples import ROOT


def test_the_site_builds_strictly(tmp_path):
    missing = [name for name in ("mkdocs", "material", "mkdocstrings_handlers.python")
               if importlib.util.find_spec(name.split(".")[0]) is None]
    if missing:
        message = (f"the docs extra is not installed ({', '.join(missing)}): "
                   f"pip install -e '.[docs]'")
        if in_ci():
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_MKDOCS_2_WARNING="1")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(tmp_path / "site")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    site = tmp_path / "site"
    built = {p.relative_to(site).as_posix() for p in site.rglob("index.html")}
    for page in ("tutorial/index.html", "reference/api/index.html", "reference/cli/index.html",
                 "concepts/lifecycle/index.html", "PERFORMANCE/index.html"):
        assert page in built
    cli = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    assert "--max-outage" in cli and "<!-- generated" not in cli
    api = (site / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert "QueueWorker" in api and ":::" not in api
    assert ":meth:" not in api and ":class:" not in api  # roles shown as the names
    tutorial = (site / "tutorial" / "index.html").read_text(encoding="utf-8")
    assert "Greet" in tutorial and "example:" not in tutorial  # the suite's notes left out
