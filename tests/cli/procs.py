"""Running the command line as a user does: a separate process, with an environment
free of the CARAVEL_* variables of whoever runs the tests."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]


def environment(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("CARAVEL_") or name.startswith("CARAVEL_TEST_DATABASES")}
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra or {})
    return env


def command(*args: str, python: Sequence[str] = ()) -> List[str]:
    return list(python or [sys.executable, "-m", "caravel_lite"]) + list(args)


def run(*args: str, env: Optional[Dict[str, str]] = None, timeout: float = 60,
        python: Sequence[str] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(command(*args, python=python), env=environment(env), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def start(*args: str, env: Optional[Dict[str, str]] = None) -> subprocess.Popen:
    return subprocess.Popen(command(*args), env=environment(env), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process: subprocess.Popen, timeout: float = 30) -> tuple:
    """(exit code, stdout, stderr) once the process ended (killed after ``timeout``)."""
    try:
        out, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return process.returncode, out, err


def one_line(text: str) -> str:
    """The single line of ``text``; fails if there are more or none."""
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got {len(lines)}: {text!r}"
    return lines[0]
