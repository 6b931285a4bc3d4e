"""Issue 13's worker scenarios: what users get from a worker with no tuning, jobs that
sleep at a concurrency, what an idle worker costs, and the connections it holds.

Each takes an opened, installed peer in a fresh database and returns one Sample.
"""
from __future__ import annotations

import time
from typing import Callable, List, Tuple

from bench.case import needs
from bench.connections import ConnectionCounter
from bench.peers.base import Peer
from bench.processes import cpu_seconds, drain_in_processes, serving
from bench.settings import Settings
from bench.timing import Sample


CONNECTION_BUDGET = 10.0  # seconds: enough to see every connection a worker opens


def default_drain(processes: int) -> Callable[[Peer, Settings], Sample]:
    """``processes`` workers with the library's defaults empty a pre-filled queue of
    no-op jobs; from the moment the first handler began until the last one finished."""
    def run(peer: Peer, s: Settings) -> Sample:
        needs(peer, "drain_default", "no worker")
        peer.prefill(s.jobs)
        return drain_in_processes(type(peer), peer.target, processes, s.jobs, s.timeout,
                                  method="drain_default", args=(s.jobs,),
                                  from_first_handler=True, budget=s.drain_budget)
    return run


def sleeping(concurrency: int) -> Callable[[Peer, Settings], Sample]:
    """One worker process at ``concurrency`` over jobs that each sleep; the value is
    the rate as a percentage of the ideal one (concurrency / sleep time)."""
    def run(peer: Peer, s: Settings) -> Sample:
        peer.check_concurrency()
        peer.prefill_sleep(s.sleep_jobs, s.sleep_seconds)
        sample = drain_in_processes(type(peer), peer.target, 1, s.sleep_jobs, s.timeout,
                                    method="drain_sleep", args=(s.sleep_jobs, concurrency),
                                    from_first_handler=True, budget=s.drain_budget)
        ideal = concurrency / s.sleep_seconds
        sample.value = 100.0 * sample.rate / ideal
        return sample
    return run


def idle_cpu(peer: Peer, s: Settings) -> Sample:
    """CPU time (user + system, every thread) of one idle worker process with default
    settings over ``idle_seconds`` (other queues: ``idle_peer_seconds``), after it
    settled; value: % of one core."""
    needs(peer, "serve", "no worker")
    seconds = s.idle_seconds if peer.name.startswith("caravel_lite") else s.idle_peer_seconds
    with serving(type(peer), peer.target, settle=2.0) as worker:
        before, started = cpu_seconds(worker.pid), time.monotonic()
        time.sleep(seconds)
        used, elapsed = cpu_seconds(worker.pid) - before, time.monotonic() - started
        failure = worker.failure()
    if failure:
        raise RuntimeError(failure)
    return Sample(0, elapsed, value=100.0 * used / elapsed,
                  note=f"{used * 1000:.0f} ms of CPU in {elapsed:.0f} s")


def connections(peer: Peer, s: Settings) -> Sample:
    """The most connections one worker process at ``connection_concurrency`` held while
    it ran sleeping jobs (sampled every 20 ms, the parent's own connections excluded);
    value: that maximum."""
    peer.check_concurrency()
    n = s.connection_concurrency
    peer.prefill_sleep(s.connection_jobs, s.sleep_seconds)
    counter = ConnectionCounter(peer.target)
    try:
        baseline = counter.count(())  # the parent's (SQLite: none counted, pids empty)
        seen: List[Tuple[float, float]] = []
        started = time.monotonic()

        def watch(pids: List[int]) -> None:
            seen.append((time.monotonic() - started, counter.count(pids) - baseline))
        sample = drain_in_processes(type(peer), peer.target, 1, s.connection_jobs,
                                    s.timeout, method="drain_sleep",
                                    args=(s.connection_jobs, n), watch=watch,
                                    budget=CONNECTION_BUDGET)
    finally:
        counter.close()
    sample.value = max((count for _, count in seen), default=float("nan"))
    sample.series = seen
    sample.note = f"concurrency {n}, {len(seen)} samples"
    return sample
