"""One step of a ``--baseline`` round, run in a fresh process against one checkout's
library: the parent's :func:`run_step`, the child's :func:`child_main`.

The child imports this harness (``bench``) from this checkout first, then puts the
side's root first on ``sys.path`` and drops the editable install's finder (it maps
``caravel_lite.migrations`` to the installed checkout's scripts whatever comes first on
the path), so that ``caravel_lite`` and the migrations it applies are the side's own.
Every loaded ``caravel_lite`` module and the migrations directory are checked to lie
under that root, and the child says where they came from. Both sides run the same
harness code in the same kind of process; only the library differs.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, Iterable, List, Optional, Tuple

from bench.targets import Target
from bench.timing import Sample, timed_each

MARK = "BENCH-SIDE "
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from bench import side; side.child_main()"
CALLS = ("enqueue", "enqueue-key", "claim")  # served in chunks (:class:`Server`)
STEPS = ("identity", "fill", "analyze", "default", "run-once") + CALLS


def _command(harness: str, root: str, step: str, target: Optional[Target], jobs: int,
             budget: float) -> List[str]:
    request = {"step": step, "jobs": jobs, "budget": budget,
               "target": dataclasses.asdict(target) if target is not None else None}
    return [sys.executable, "-c", BOOT, harness, root, json.dumps(request)]


def _answer(lines: Iterable[str]) -> Optional[Dict[str, Any]]:
    for line in lines:
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    return None


def _failure(stderr: str, fallback: str) -> RuntimeError:
    text = stderr.strip() or fallback
    return RuntimeError(text.splitlines()[-1][:200])


def run_step(harness: str, root: str, step: str, target: Optional[Target], jobs: int,
             budget: float, timeout: float, cwd: str) -> Dict[str, Any]:
    """Run ``step`` in a new process against the library under ``root``; its answer
    (``library``, ``migrations`` and, for a measured step, ``count``, ``seconds``,
    ``latencies``). A failure in the child raises RuntimeError with its last line."""
    done = subprocess.run(_command(harness, root, step, target, jobs, budget), cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)
    answer = _answer(reversed(done.stdout.splitlines()))
    if answer is None:
        raise _failure(done.stderr, f"exit {done.returncode}")
    return answer


class Server:
    """A process holding one side's peer in its own database, answering chunks of one
    per-call scenario (:data:`CALLS`); the claim scenario's jobs are filled first."""

    def __init__(self, harness: str, root: str, step: str, target: Target, jobs: int,
                 cwd: str) -> None:
        self._errors = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen(_command(harness, root, step, target, jobs, 0.0),
                                         cwd=cwd, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self._errors,
                                         text=True)
        self.ready = self._read()

    def _read(self) -> Dict[str, Any]:
        assert self._process.stdout is not None
        answer = _answer(self._process.stdout)
        if answer is None:
            self._process.wait(30)
            self._errors.seek(0)
            raise _failure(self._errors.read(), f"exit {self._process.returncode}")
        return answer

    def calls(self, offset: int, n: int) -> Sample:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"offset": offset, "n": n}) + "\n")
        self._process.stdin.flush()
        answer = self._read()
        return Sample(answer["count"], answer["seconds"], answer["latencies"], expected=n)

    def close(self) -> Dict[str, Any]:
        """Ends the process; its closing answer (where the library came from)."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.close()
            return self._read()
        finally:
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._errors.close()


def sample_of(answer: Dict[str, Any]) -> Sample:
    return Sample(answer["count"], answer["seconds"], answer.get("latencies") or [],
                  expected=answer["expected"], cpu_seconds=answer.get("cpu_seconds"))


# -- child ---------------------------------------------------------------------------

def _isolate(root: str) -> None:
    sys.path.insert(0, root)
    sys.meta_path[:] = [finder for finder in sys.meta_path if not _editable(finder)]


def _editable(finder: Any) -> bool:
    """setuptools' finder of an editable install of caravel_lite (a class whose module
    is ``__editable___caravel_lite_<version>_finder``)."""
    module = str(getattr(finder, "__module__", ""))
    return module.startswith("__editable__") and "caravel_lite" in module


def _under(path: str, root: str) -> bool:
    return os.path.realpath(path).startswith(root + os.sep)


def _check_library(root: str) -> str:
    import caravel_lite

    strays = sorted(name for name, module in list(sys.modules.items())
                    if (name == "caravel_lite" or name.startswith("caravel_lite."))
                    and getattr(module, "__file__", None)
                    and not _under(str(module.__file__), root))
    if strays:
        raise RuntimeError(f"modules imported from outside {root}: {', '.join(strays)}")
    return os.path.realpath(caravel_lite.__file__)


def _migrations_directory(db: Any, root: str) -> str:
    from caravel_lite import migrator

    directory = os.path.realpath(migrator.runner(db).directory)
    if not _under(directory, root):
        raise RuntimeError(f"migrations from {directory}, outside {root}")
    return directory


def _peer(target: Target, install: bool) -> Tuple[Any, List[str]]:
    """The opened peer, and the migrations applied to its fresh database (the side's
    own scripts) when ``install``."""
    from bench.peers.caravel import CaravelPeer

    peer = CaravelPeer(target)
    peer.open()
    return peer, (list(peer.cl.migrate(peer.db)) if install else [])


def _calls(step: str, peer: Any, offset: int, n: int) -> Sample:
    """n calls of a per-call scenario, each timed: enqueue (no key), enqueue with its
    own idempotency key (the dispatches built before the clock starts), or claim +
    complete of one pre-filled job."""
    from bench.peers.caravel import BenchJob

    if step == "enqueue":
        return timed_each(lambda i: peer.enqueue_one(offset + i), n)
    if step == "enqueue-key":
        dispatches = [dataclasses.replace(peer.dispatch, idempotency_key=f"bench-key-{i}")
                      for i in range(offset, offset + n)]
        return timed_each(lambda i: peer.queue.enqueue(BenchJob(offset + i, 0.0),
                                                       dispatches[i]), n)
    return timed_each(lambda _i: peer.claim_one(), n)


def _default_drain(peer: Any, n: int, budget: float) -> Sample:
    """``QueueWorker(queue).run(...)`` with no setting given until n jobs ran (or the
    budget is spent), from the first handler's start to the last one's end."""
    import threading

    from bench.tally import TALLY

    timer = threading.Timer(budget, TALLY.cut)
    timer.daemon = True
    timer.start()
    try:
        done = peer.drain_default(n)
    finally:
        timer.cancel()
    first, last = TALLY.first_start, TALLY.last_done
    seconds = (last - first) if first is not None and last is not None else 0.0
    cpu = (TALLY.last_cpu - TALLY.first_cpu
           if TALLY.first_cpu is not None and TALLY.last_cpu is not None else None)
    return Sample(done, seconds, expected=n, cpu_seconds=cpu)


def _run_once_loop(peer: Any, n: int, budget: float) -> Sample:
    """A script's loop: ``QueueWorker(queue).run_once(queue)`` until n jobs ran, then
    ``close()``; timed from before the first call until close returned."""
    from caravel_lite.worker import QueueWorker

    from bench.peers.base import QUEUE

    started = time.perf_counter()
    worker = QueueWorker(peer.queue)
    done = misses = 0
    while done < n and misses < 2 and time.perf_counter() - started < budget:
        if worker.run_once(QUEUE):
            done += 1
            misses = 0
        else:
            misses += 1  # a lost race can return False once while jobs remain
    worker.close()
    return Sample(done, time.perf_counter() - started, expected=n)


def _serve(step: str, peer: Any, n: int, ready: Dict[str, Any]) -> None:
    """Answer chunks of calls read from stdin (``{"offset": i, "n": k}`` per line) until
    it closes, so that the parent can alternate the two sides every few calls."""
    if step == "claim":
        peer.prefill(n)
    print(MARK + json.dumps(ready), flush=True)
    for line in sys.stdin:
        chunk = json.loads(line)
        sample = _calls(step, peer, chunk["offset"], chunk["n"])
        print(MARK + json.dumps({"count": sample.count, "seconds": sample.seconds,
                                 "latencies": sample.latencies}), flush=True)


def _measure(step: str, peer: Any, n: int, budget: float,
             ready: Dict[str, Any]) -> Optional[Sample]:
    if step in CALLS:
        _serve(step, peer, n, ready)
        return None
    if step == "fill":
        peer.prefill(n)
        return None
    if step == "analyze":
        peer.analyze()
        return None
    if step == "default":
        return _default_drain(peer, n, budget)
    return _run_once_loop(peer, n, budget)


def child_main() -> None:
    # argv[1], the harness, is on sys.path already (BOOT), behind the side's root soon.
    root, raw = os.path.realpath(sys.argv[2]), sys.argv[3]
    request = json.loads(raw)
    try:
        _isolate(root)
        answer: Dict[str, Any] = {"library": _check_library(root)}
        step, n, budget = request["step"], request["jobs"], request["budget"]
        if request["target"] is not None:
            peer, answer["applied"] = _peer(Target(**request["target"]),
                                            install=step not in ("analyze", "default", "run-once"))
            try:
                answer["migrations"] = _migrations_directory(peer.db, root)
                sample = (_measure(step, peer, n, budget, dict(answer))
                          if step != "identity" else None)
            finally:
                peer.close()
            if sample is not None:
                answer.update(count=sample.count, seconds=sample.seconds,
                              expected=sample.expected, latencies=sample.latencies,
                              cpu_seconds=sample.cpu_seconds)
        answer["library"] = _check_library(root)  # and nothing strayed in on the way
    except BaseException:
        traceback.print_exc()
        sys.exit(1)
    print(MARK + json.dumps(answer), flush=True)

