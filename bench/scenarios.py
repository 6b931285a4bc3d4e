"""Every scenario the benchmark knows, in table order. Issue 13's (the default set):
enqueue one job per call, drain with the default worker in 1, 2 and 4 processes,
jobs sleeping 50 ms at a concurrency, idle CPU, connections at concurrency 50, pickup
latency, claim cost with history retained, claims during a prune; and issue 31's on
SQLite (also default): enqueue with a key per call, a run_once() loop. The first round's
tuned scenarios (bulk enqueue, the fastest drain loops, end to end) stay selectable.

Each case takes an opened, installed peer in a fresh database and returns one measured
:class:`Sample` (or raises NotApplicable).
"""
from __future__ import annotations

import random
import time
from typing import Callable, List

from bench import history_scenarios as history
from bench import worker_scenarios as worker
from bench import workflow_scenarios as workflow
from bench.case import Case, needs
from bench.peers.base import Peer
from bench.processes import drain_in_processes, serving
from bench.settings import Settings
from bench.timing import Sample, timed_each


def enqueue(peer: Peer, s: Settings) -> Sample:
    return peer.enqueue_each(s.jobs, s.drain_budget)


def enqueue_keyed(peer: Peer, s: Settings) -> Sample:
    needs(peer, "enqueue_one_keyed", "n/a")
    return timed_each(peer.enqueue_one_keyed, s.jobs, s.drain_budget)


def run_once(peer: Peer, s: Settings) -> Sample:
    """One process runs the pre-filled no-op jobs one call per job until the queue is
    empty, as a cron script does (caravel_lite: ``QueueWorker.run_once``)."""
    needs(peer, "drain_run_once", "n/a")
    peer.prefill(s.jobs)
    return drain_in_processes(type(peer), peer.target, 1, s.jobs, s.timeout,
                              method="drain_run_once", args=(s.drain_budget,))


def bulk(peer: Peer, s: Settings) -> Sample:
    return peer.enqueue_bulk(s.jobs)


def drain(processes: int) -> Callable[[Peer, Settings], Sample]:
    def run(peer: Peer, s: Settings) -> Sample:
        needs(peer, "drain", "n/a")
        peer.prefill(s.jobs)
        return drain_in_processes(type(peer), peer.target, processes, s.jobs, s.timeout)
    return run


def pickup(peer: Peer, s: Settings) -> Sample:
    """An idle worker with default settings; jobs enqueued one at a time after a random
    pause, each waited for; at most ``pickup_jobs`` jobs or ``pickup_budget`` seconds."""
    needs(peer, "serve", "no worker")
    rng = random.Random(6)
    latencies: List[float] = []
    start = time.perf_counter()
    with serving(type(peer), peer.target) as served:
        while len(latencies) < s.pickup_jobs and time.perf_counter() - start < s.pickup_budget:
            time.sleep(rng.uniform(0, s.pickup_gap))
            peer.enqueue_stamped()
            latencies.append(served.next_latency(s.timeout))
    return Sample(len(latencies), time.perf_counter() - start, latencies,
                  expected=s.pickup_jobs)


def end_to_end(peer: Peer, s: Settings) -> Sample:
    """One producer enqueueing one job per call while a default-settings worker runs;
    from the first enqueue until the last handler started."""
    needs(peer, "serve", "no worker")
    with serving(type(peer), peer.target) as served:
        start = time.time()
        for _ in range(s.jobs):
            peer.enqueue_stamped()
        latencies = [served.next_latency(s.timeout) for _ in range(s.jobs)]
        elapsed = time.time() - start
    return Sample(len(latencies), elapsed, latencies, expected=s.jobs)


def _plural(n: int) -> str:
    return f"{n} worker process" + ("es" if n > 1 else "")


def _default_drain(n: int) -> Case:
    return Case(f"default{n}", "default", f"drain, default worker, {_plural(n)}",
                worker.default_drain(n), one_round=n > 1)


def cases(settings: Settings) -> List[Case]:
    s = settings
    found = [Case("enqueue", "enqueue", "enqueue, one job per call", enqueue),
             # issue 31: a key per call; and run_once() in a loop (SQLite's targets)
             Case("enqueue-key", "enqueue-key", "enqueue, one job per call, each with an "
                  "idempotency key", enqueue_keyed, kinds=("sqlite",))]
    found.append(_default_drain(1))
    found.append(Case("runonce", "runonce", "drain, run_once() loop, 1 process", run_once,
                      kinds=("sqlite",)))
    for n in s.concurrencies:
        found.append(Case(f"sleep{n}", "sleep",
                          f"{s.sleep_jobs:,} jobs sleeping {s.sleep_seconds * 1000:.0f} ms, "
                          f"concurrency {n}", worker.sleeping(n), unit="% of ideal",
                          one_round=True))
    found += [
        Case("idle", "idle", f"idle worker, CPU over {s.idle_seconds:.0f} s", worker.idle_cpu,
             rate=False, unit="% of a core", one_round=True),
        Case("connections", "connections",
             f"connections, one worker process, concurrency {s.connection_concurrency}",
             worker.connections, rate=False, unit="connections", one_round=True),
        Case("pickup", "pickup", f"pickup latency, idle default worker (up to "
             f"{s.pickup_jobs} jobs)", pickup, rate=False, one_round=True),
        Case("prune", "prune", f"claims while prune removes {s.prune_rows:,} finished rows",
             history.prune_under_load, rate=False, unit="ms p99", one_round=True),
        Case("history", "history", "claim with history retained vs empty (claim only)",
             history.claim_history, rate=False, unit="x empty", one_round=True),
    ]
    # Several processes last: on a slow moment of the machine --budget cuts these
    # first (the one-process rows hold most targets).
    found += [_default_drain(n) for n in s.workers if n != 1]
    found += [
        # The first round's tuned scenarios, selectable with --scenarios.
        Case("bulk", "bulk", "bulk enqueue, one call", bulk),
    ]
    for n in s.workers:
        found.append(Case(f"drain{n}", "drain", f"drain, fastest loop, {_plural(n)}", drain(n)))
    found.append(Case("e2e", "e2e", "end to end, default worker settings", end_to_end))
    found += workflow.cases()  # issue 26: batch1000, chain100
    return found


FAMILIES = ("enqueue", "default", "sleep", "idle", "connections", "pickup", "history",
            "prune", "enqueue-key", "runonce", "bulk", "drain", "e2e", "batch", "chain")
DEFAULT_FAMILIES = FAMILIES[:10]
