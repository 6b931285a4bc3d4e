"""Worker processes: N drainers started together, one idle worker serving probes, or
one process running a single peer call in the background.

Children are spawned (not forked) and build their own peer and connections; the parent
starts the clock when every child is connected and waiting at a barrier.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue as queue_module
import time
import traceback
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, Type

from bench import probe
from bench.tally import TALLY
from bench.targets import Target
from bench.timing import Sample

_ctx = multiprocessing.get_context("spawn")
START_TIMEOUT = 120.0
WATCH_EVERY = 0.02  # seconds between two calls of a drain's watcher


def _drain_child(peer_cls: Type, target: Target, barrier: Any, results: Any, method: str,
                 args: Tuple[Any, ...], shared: Tuple[Any, Any]) -> None:
    TALLY.share(*shared)
    peer = peer_cls(target)
    try:
        peer.open()
        barrier.wait(START_TIMEOUT)
        done = getattr(peer, method)(*args)
        # A peer whose drain exits well after its last job (a shutdown delay) records
        # when its last handler finished; the clock stops there.
        results.put(("ok", done, TALLY.first_start,
                     getattr(peer, "last_done", None) or time.monotonic()))
    except BaseException:
        results.put(("error", traceback.format_exc(limit=3), None, time.monotonic()))
    finally:
        with contextlib.suppress(Exception):
            peer.close()


def drain_in_processes(peer_cls: Type, target: Target, processes: int, expected: int,
                       timeout: float, method: str = "drain", args: Sequence[Any] = (),
                       watch: Optional[Callable[[List[int]], None]] = None,
                       from_first_handler: bool = False,
                       budget: Optional[float] = None) -> Sample:
    """Wall time for ``processes`` workers to empty a pre-filled queue together, each
    calling ``peer.<method>(*args)``: from the moment all are connected, or with
    ``from_first_handler`` from the moment the first handler began (a worker's start-up,
    schema checks and listeners excluded), until the last handler finished.
    ``watch``, if given, is called with the children's process ids every few
    milliseconds until they are done (it must be quick). With ``budget`` (seconds), the
    workers are told to stop once it is spent (through the shared tally, so only for
    methods that arm it): the sample then counts the jobs that ran, as incomplete."""
    barrier = _ctx.Barrier(processes + 1)
    results = _ctx.Queue()
    shared = (_ctx.Value("q", 0), _ctx.Event())  # the drain's count, across processes
    children = [_ctx.Process(target=_drain_child,
                             args=(peer_cls, target, barrier, results, method, tuple(args),
                                   shared),
                             daemon=True) for _ in range(processes)]
    for child in children:
        child.start()
    outcomes: List[Tuple[str, Any, Optional[float], float]] = []
    try:
        barrier.wait(START_TIMEOUT)
        start = time.monotonic()
        deadline = start + timeout
        cut = start + budget if budget is not None else None
        pids = [int(child.pid or 0) for child in children]
        while len(outcomes) < len(children):
            if cut is not None and time.monotonic() > cut:
                shared[1].set()  # every child's tally watcher stops its worker
                cut = None
            if time.monotonic() > deadline:
                raise TimeoutError(f"workers did not finish within {timeout:g} s")
            if watch is not None:
                watch(pids)
            try:
                outcomes.append(results.get(timeout=WATCH_EVERY if watch or cut else 1.0))
            except queue_module.Empty:
                continue
    finally:
        _reap(children)
    errors = [detail for status, detail, _, _ in outcomes if status == "error"]
    if errors:
        raise RuntimeError(errors[0].strip().splitlines()[-1])
    done = sum(detail for _, detail, _, _ in outcomes)
    if from_first_handler:
        firsts = [first for _, _, first, _ in outcomes if first is not None]
        start = min(firsts, default=start)
    return Sample(done, max(end for _, _, _, end in outcomes) - start, expected=expected)


def _serve_child(peer_cls: Type, target: Target, stop: Any, sink: Any, ready: Any) -> None:
    probe.attach(sink)
    peer = peer_cls(target)
    try:
        peer.open()
        ready.set()
        peer.serve(stop)
    except BaseException:
        sink.put("error: " + traceback.format_exc(limit=3).strip().splitlines()[-1])
    finally:
        with contextlib.suppress(Exception):
            peer.close()


class Serving:
    """A worker process running the peer's ``serve``; ``next_latency`` reads its probes."""

    def __init__(self, sink: Any, pid: int) -> None:
        self.sink = sink
        self.pid = pid

    def next_latency(self, timeout: float) -> float:
        try:
            value = self.sink.get(timeout=timeout)
        except queue_module.Empty:
            raise TimeoutError(f"no job started within {timeout:g} s") from None
        if isinstance(value, str):
            raise RuntimeError(value)
        return value

    def failure(self) -> Optional[str]:
        """The worker's error, if it reported one (without waiting)."""
        try:
            value = self.sink.get_nowait()
        except queue_module.Empty:
            return None
        return value if isinstance(value, str) else None


@contextlib.contextmanager
def serving(peer_cls: Type, target: Target, settle: float = 1.0) -> Iterator[Serving]:
    """Run an idle worker for the duration of the block, then stop it."""
    stop, ready, sink = _ctx.Event(), _ctx.Event(), _ctx.Queue()
    child = _ctx.Process(target=_serve_child, args=(peer_cls, target, stop, sink, ready),
                         daemon=True)
    child.start()
    if not ready.wait(START_TIMEOUT):
        _reap([child])
        raise RuntimeError("worker process did not start")
    time.sleep(settle)  # let it reach its idle loop
    try:
        yield Serving(sink, int(child.pid or 0))
    finally:
        stop.set()
        _reap([child], grace=15.0)


def _call_child(peer_cls: Type, target: Target, method: str, args: Tuple[Any, ...],
                ready: Any, go: Any, results: Any) -> None:
    peer = peer_cls(target)
    try:
        peer.open()
        ready.set()
        go.wait(START_TIMEOUT)
        started = time.monotonic()
        value = getattr(peer, method)(*args)
        results.put(("ok", value, started, time.monotonic()))
    except BaseException:
        results.put(("error", traceback.format_exc(limit=3).strip().splitlines()[-1],
                     0.0, time.monotonic()))
    finally:
        with contextlib.suppress(Exception):
            peer.close()


class Background:
    """One peer call running in its own process: ``start`` releases it, ``result``
    is None until it has returned, then ``(value, started, ended)`` (monotonic)."""

    def __init__(self, go: Any, results: Any) -> None:
        self._go = go
        self._results = results
        self._outcome: Optional[Tuple[Any, float, float]] = None

    def start(self) -> float:
        self._go.set()
        return time.monotonic()

    def result(self, wait: float = 0.0) -> Optional[Tuple[Any, float, float]]:
        if self._outcome is None:
            try:
                status, value, started, ended = self._results.get(timeout=wait) if wait \
                    else self._results.get_nowait()
            except queue_module.Empty:
                return None
            if status == "error":
                raise RuntimeError(value)
            self._outcome = (value, started, ended)
        return self._outcome


@contextlib.contextmanager
def in_background(peer_cls: Type, target: Target, method: str,
                  *args: Any) -> Iterator[Background]:
    """A process that opens the peer and, once started, calls ``peer.<method>(*args)``."""
    ready, go, results = _ctx.Event(), _ctx.Event(), _ctx.Queue()
    child = _ctx.Process(target=_call_child,
                         args=(peer_cls, target, method, args, ready, go, results),
                         daemon=True)
    child.start()
    try:
        if not ready.wait(START_TIMEOUT):
            raise RuntimeError("background process did not start")
        yield Background(go, results)
    finally:
        go.set()
        _reap([child], grace=1.0)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name may hold spaces; the fields after it are space-separated.
        fields = stat.read().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return ticks / os.sysconf("SC_CLK_TCK")


def _reap(children: List[Any], grace: float = 5.0) -> None:
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.terminate()
            child.join(5)
