"""The worker processes of a fault-injection run: started, signalled, reaped, and
what the harness did to each (times are wall-clock seconds), which the audit reads."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple

from tests.chaos.plan import Mode, Schedule, Stop
from tests.chaos.proxy import ChaosProxy, Window
from tests.chaos.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class WorkerProcess:
    """One worker process as the harness saw it (times are wall-clock seconds)."""

    index: int
    mode: Mode
    log: Path
    stderr: Path
    popen: subprocess.Popen
    proxy: Optional[ChaosProxy]
    started_at: float
    stop: Optional[Stop] = None
    signalled_at: Optional[float] = None
    # The moment from which the worker may abandon what its handlers do: the signal
    # that ends the run abruptly (the second SIGINT of SIGINT_TWICE), else the first.
    abrupt_at: Optional[float] = None
    second_sigint_at: Optional[float] = None
    exited_at: Optional[float] = None
    returncode: Optional[int] = None
    killed: bool = False
    drain: bool = False
    is_ready: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    def ready(self) -> bool:
        """Whether the process is inside run() (it handles signals as its mode says)."""
        if not self.is_ready:
            try:
                with open(self.log, "rb") as log:
                    self.is_ready = log.read(5) == b"ready"
            except FileNotFoundError:
                pass
        return self.is_ready

    def windows(self) -> List[Window]:
        return list(self.proxy.windows) if self.proxy is not None else []


class Fleet:
    """Every worker process of one run (:mod:`tests.chaos.worker`)."""

    def __init__(self, url: str, seed: int, settings: Settings, schedule: Schedule,
                 directory: Path) -> None:
        self.url = url
        self.seed = seed
        self.settings = settings
        self.schedule = schedule
        self.directory = directory
        self.workers: List[WorkerProcess] = []
        self.second_sigints: List[WorkerProcess] = []

    def start(self, mode: Mode, proxy: Optional[ChaosProxy],
              drain: bool = False) -> WorkerProcess:
        """A new worker process, connected through ``proxy`` when given."""
        index = len(self.workers)
        url = proxy.through(self.url) if proxy is not None else self.url
        log = self.directory / f"worker{index}.log"
        stderr = self.directory / f"worker{index}.err"
        s = self.settings
        argv = [sys.executable, "-m", "tests.chaos.worker", "--url", url,
                "--results-url", self.url, "--seed", str(self.seed), "--mode", mode.value,
                "--log", str(log), "--concurrency", str(s.concurrency),
                "--lease", str(s.lease), "--renewal", str(s.renewal),
                "--lifetime", str(s.lifetime), "--max-attempts", str(s.max_attempts),
                "--shutdown-timeout", str(s.shutdown_timeout),
                "--max-outage", str(s.max_outage), "--behaviours", s.behaviours]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        with open(stderr, "wb") as err:
            popen = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                     stderr=err)
        worker = WorkerProcess(index, mode, log, stderr, popen, proxy, time.time(),
                               drain=drain)
        self.workers.append(worker)
        return worker

    def live(self) -> List[WorkerProcess]:
        return [w for w in self.workers if w.exited_at is None]

    def reap(self) -> None:
        for worker in self.live():
            code = worker.popen.poll()
            if code is not None:
                worker.exited_at = time.time()
                worker.returncode = code
                if worker.proxy is not None:
                    worker.proxy.close()

    def signal(self, worker: WorkerProcess, stop: Stop) -> None:
        """Send the first signal of ``stop`` (a second SIGINT is sent later)."""
        worker.stop = stop
        sent = time.time()
        worker.signalled_at = sent
        if stop is not Stop.SIGINT_TWICE:
            worker.abrupt_at = sent
        signum = signal.SIGTERM if stop in (Stop.SIGTERM, Stop.SIGTERM_EXIT) else signal.SIGINT
        worker.popen.send_signal(signum)
        if stop is Stop.SIGINT_TWICE:
            worker.second_sigint_at = sent + self.schedule.second_sigint_after()
            self.second_sigints.append(worker)

    def send_second_sigints(self, now: float) -> None:
        for worker in list(self.second_sigints):
            assert worker.second_sigint_at is not None
            if now >= worker.second_sigint_at:
                self.second_sigints.remove(worker)
                worker.abrupt_at = time.time()
                if worker.exited_at is None and worker.popen.poll() is None:
                    worker.popen.send_signal(signal.SIGINT)

    def wait_ready(self, workers: List[WorkerProcess], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for worker in workers:
            while not worker.ready() and worker.popen.poll() is None:
                if time.monotonic() > deadline:
                    raise AssertionError(f"worker {worker.pid} did not start: "
                                         f"{worker.stderr.read_text(errors='replace')}")
                time.sleep(0.01)

    def stop_all(self, workers: List[WorkerProcess]) -> None:
        """SIGTERM to each (a clean stop, or SystemExit for exit_on_sigterm workers),
        then wait; kill what is still there after ``exit_timeout``. A worker still
        starting is signalled once it handles signals (before, SIGTERM kills it)."""
        self.wait_ready([w for w in workers if w.exited_at is None])
        for worker in workers:
            if worker.exited_at is None and worker.signalled_at is None:
                self.signal(worker, Stop.SIGTERM if worker.mode is Mode.HANDLE_SIGNALS
                            else Stop.SIGTERM_EXIT)
        self.wait_exits(workers)

    def wait_exits(self, workers: List[WorkerProcess]) -> None:
        while True:
            self.reap()
            now = time.time()
            self.send_second_sigints(now)
            waiting = [w for w in workers if w.exited_at is None]
            if not waiting:
                return
            for worker in waiting:
                assert worker.signalled_at is not None
                if now - worker.signalled_at > self.settings.exit_timeout:
                    worker.killed = True
                    worker.popen.kill()
            time.sleep(0.02)

    def kill_all(self) -> None:
        for worker in self.workers:
            if worker.popen.poll() is None:
                worker.popen.kill()
        for worker in self.workers:
            worker.popen.wait()

    def write(self, path: Path, stalls: List[Tuple[float, float]]) -> None:
        """What the harness did to each process, beside their logs (for a post-mortem)."""
        rows = [{"pid": w.pid, "mode": w.mode.value, "drain": w.drain,
                 "log": w.log.name, "started_at": w.started_at,
                 "stop": w.stop.value if w.stop else None, "signalled_at": w.signalled_at,
                 "abrupt_at": w.abrupt_at, "exited_at": w.exited_at,
                 "returncode": w.returncode, "killed": w.killed,
                 "windows": [(x.fault.value, x.start, x.end) for x in w.windows()]}
                for w in self.workers]
        path.write_text(json.dumps({"seed": self.seed, "workers": rows, "stalls": stalls},
                                   indent=1))
