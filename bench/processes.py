"""Worker processes: N drainers started together, or one idle worker serving probes.

Children are spawned (not forked) and build their own peer and connections; the parent
starts the clock when every child is connected and waiting at a barrier.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import queue as queue_module
import time
import traceback
from typing import Any, Iterator, List, Type

from bench import probe
from bench.targets import Target
from bench.timing import Sample

_ctx = multiprocessing.get_context("spawn")
START_TIMEOUT = 120.0


def _drain_child(peer_cls: Type, target: Target, barrier: Any, results: Any) -> None:
    peer = peer_cls(target)
    try:
        peer.open()
        barrier.wait(START_TIMEOUT)
        done = peer.drain()
        # A peer whose drain exits well after its last job (a shutdown delay) records
        # when its last handler finished; the clock stops there.
        results.put(("ok", done, getattr(peer, "last_done", None) or time.monotonic()))
    except BaseException:
        results.put(("error", traceback.format_exc(limit=3), time.monotonic()))
    finally:
        with contextlib.suppress(Exception):
            peer.close()


def drain_in_processes(peer_cls: Type, target: Target, processes: int, expected: int,
                       timeout: float) -> Sample:
    """Wall time for ``processes`` workers to empty a pre-filled queue together."""
    barrier = _ctx.Barrier(processes + 1)
    results = _ctx.Queue()
    children = [_ctx.Process(target=_drain_child, args=(peer_cls, target, barrier, results),
                             daemon=True) for _ in range(processes)]
    for child in children:
        child.start()
    try:
        barrier.wait(START_TIMEOUT)
        start = time.monotonic()
        outcomes = [results.get(timeout=timeout) for _ in children]
    finally:
        _reap(children)
    errors = [detail for status, detail, _ in outcomes if status == "error"]
    if errors:
        raise RuntimeError(errors[0].strip().splitlines()[-1])
    done = sum(detail for _, detail, _ in outcomes)
    return Sample(done, max(end for _, _, end in outcomes) - start, expected=expected)


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

    def __init__(self, sink: Any) -> None:
        self.sink = sink

    def next_latency(self, timeout: float) -> float:
        try:
            value = self.sink.get(timeout=timeout)
        except queue_module.Empty:
            raise TimeoutError(f"no job started within {timeout:g} s") from None
        if isinstance(value, str):
            raise RuntimeError(value)
        return value


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
        yield Serving(sink)
    finally:
        stop.set()
        _reap([child], grace=15.0)


def _reap(children: List[Any], grace: float = 5.0) -> None:
    deadline = time.monotonic() + grace
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.terminate()
            child.join(5)
