"""Shared by the sample tests: settings for a backend and running the CLI."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

from caravel_lite.sample.commands import main
from caravel_lite.sample.config import SampleConfig

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_VARIABLES = ("CARAVEL_WORKER_", "CARAVEL_SMOKE_")


def target_environment(backend: str, tmp_path: Path, new_database) -> Dict[str, str]:
    """Sample settings for a fresh, unmigrated target on ``backend``."""
    if backend == "sqlite":
        return {"CARAVEL_WORKER_DIRECTORY": str(tmp_path)}
    return {"CARAVEL_WORKER_DATABASE_URL": new_database()}


def target_config(backend: str, tmp_path: Path, new_database) -> SampleConfig:
    if backend == "sqlite":
        return SampleConfig(directory=str(tmp_path))
    url = new_database()
    return SampleConfig(queue_url=url, results_url=url)


def run_in_process(argv: List[str]):
    """(exit code, stdout, stderr) of ``main`` in this process."""
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run_process(flag: str, env: Dict[str, str], extra: Optional[Dict[str, str]] = None,
                cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """The CLI as a separate process of the test interpreter."""
    environment = {name: value for name, value in os.environ.items()
                   if not name.startswith(SAMPLE_VARIABLES)}
    environment.update(env)
    environment.update(extra or {})
    environment["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "caravel_lite.sample", flag],
                          env=environment, cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def json_of(done: subprocess.CompletedProcess, expect: int = 0):
    assert done.returncode == expect, done.stderr
    return json.loads(done.stdout)
