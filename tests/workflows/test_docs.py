"""docs/workflows.md's examples run as a user runs them: its python snippets, in
order, as one script in a directory of its own (a SQLite file there)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_workflow_examples_run_as_a_script(tmp_path):
    text = (ROOT / "docs" / "workflows.md").read_text(encoding="utf-8")
    snippets = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(snippets) == 5  # the shared start and one per feature
    script = tmp_path / "workflows_example.py"
    script.write_text("\n".join(snippets) + "\nprint('ok')\n", encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")
