"""Child processes of the fault tests: started with the repository on the path, their
output kept in files, and always reaped (SIGKILL as a last resort) when a test ends."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]


class Child:
    def __init__(self, popen: subprocess.Popen, out: Path, log: Path,
                 says_ready: bool) -> None:
        self.popen = popen
        self.out = out
        self.log = log
        self.says_ready = says_ready  # writes ``out``.ready once it handles SIGTERM

    @property
    def pid(self) -> int:
        return self.popen.pid

    def ready(self) -> bool:
        return Path(str(self.out) + ".ready").exists()

    def stoppable(self) -> bool:
        """Whether SIGTERM now means a clean stop (or the child has already ended):
        before a tests.faults.child process handles it, SIGTERM kills it (exit -15)."""
        return not self.says_ready or self.ready() or self.popen.poll() is not None

    def summary(self) -> Dict:
        return json.loads(self.out.read_text()) if self.out.exists() else {}

    def stderr(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Children:
    """A set of child processes; use as a context manager so that every child is reaped."""

    def __init__(self, directory: Path, env: Optional[Dict[str, str]] = None) -> None:
        self.directory = directory
        self.env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
        self.children: List[Child] = []
        self._n = 0

    def start(self, argv: Sequence[str], module: str = "tests.faults.child") -> Child:
        self._n += 1
        out = self.directory / f"child{self._n}.json"
        log = self.directory / f"child{self._n}.log"
        ours = module.startswith("tests.")  # a tests.faults.child: --out and .ready
        with open(log, "wb") as stderr:
            popen = subprocess.Popen([sys.executable, "-m", module, *argv,
                                      *(["--out", str(out)] if ours else [])],
                                     cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=stderr)
        child = Child(popen, out, log, says_ready=ours)
        self.children.append(child)
        return child

    def terminate(self, children: Optional[List[Child]] = None, timeout: float = 30) -> None:
        """SIGTERM, then wait for a clean exit (SIGKILL after ``timeout``). A child still
        starting is signalled once it handles SIGTERM, so that a stop requested early
        is a clean stop too, not a kill."""
        chosen = self.children if children is None else children
        deadline = time.monotonic() + timeout
        for child in chosen:
            while not child.stoppable() and time.monotonic() < deadline:
                time.sleep(0.01)
            if child.popen.poll() is None:
                child.popen.send_signal(signal.SIGTERM)
        for child in chosen:
            try:
                child.popen.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.popen.kill()
                child.popen.wait()

    def kill_all(self) -> None:
        for child in self.children:
            if child.popen.poll() is None:
                child.popen.kill()
        for child in self.children:
            child.popen.wait()

    def __enter__(self) -> "Children":
        return self

    def __exit__(self, *exc) -> None:
        self.kill_all()
