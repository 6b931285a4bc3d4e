"""The scenarios of issue 6. Each case takes an opened, installed peer in a fresh
database and returns one measured :class:`Sample` (or raises NotApplicable)."""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Callable, List

from bench.peers.base import NotApplicable, Peer
from bench.processes import drain_in_processes, serving
from bench.settings import Settings
from bench.timing import Sample


@dataclass(frozen=True)
class Case:
    key: str
    family: str          # what --scenarios selects and Peer.scenarios filters
    title: str
    run: Callable[[Peer, Settings], Sample]
    rate: bool = True    # False: only the latency is meaningful


def _needs(peer: Peer, method: str, reason: str) -> None:
    if getattr(type(peer), method) is getattr(Peer, method):
        raise NotApplicable(reason)


def enqueue(peer: Peer, s: Settings) -> Sample:
    return peer.enqueue_each(s.jobs)


def bulk(peer: Peer, s: Settings) -> Sample:
    return peer.enqueue_bulk(s.jobs)


def drain(processes: int) -> Callable[[Peer, Settings], Sample]:
    def run(peer: Peer, s: Settings) -> Sample:
        _needs(peer, "drain", "n/a")
        peer.prefill(s.jobs)
        return drain_in_processes(type(peer), peer.target, processes, s.jobs, s.timeout)
    return run


def pickup(peer: Peer, s: Settings) -> Sample:
    """An idle worker; jobs enqueued one at a time after a random pause, each waited for."""
    _needs(peer, "serve", "no worker")
    rng = random.Random(6)
    latencies: List[float] = []
    start = time.perf_counter()
    with serving(type(peer), peer.target) as worker:
        for _ in range(s.pickup_jobs):
            time.sleep(rng.uniform(0, s.pickup_gap))
            peer.enqueue_stamped()
            latencies.append(worker.next_latency(s.timeout))
    return Sample(len(latencies), time.perf_counter() - start, latencies,
                  expected=s.pickup_jobs)


def claim_empty(peer: Peer, s: Settings) -> Sample:
    _needs(peer, "claim_one", peer.claim_reason)
    peer.prefill(s.claim_jobs)
    return peer.claim_each(s.claim_jobs)


def claim_history(peer: Peer, s: Settings) -> Sample:
    _needs(peer, "claim_one", peer.claim_reason)
    peer.add_history(s.history_rows)
    peer.prefill(s.claim_jobs)
    return peer.claim_each(s.claim_jobs)


def end_to_end(peer: Peer, s: Settings) -> Sample:
    """One producer enqueueing one job per call while a default-settings worker runs;
    from the first enqueue until the last handler started."""
    _needs(peer, "serve", "no worker")
    with serving(type(peer), peer.target) as worker:
        start = time.time()
        for _ in range(s.jobs):
            peer.enqueue_stamped()
        latencies = [worker.next_latency(s.timeout) for _ in range(s.jobs)]
        elapsed = time.time() - start
    return Sample(len(latencies), elapsed, latencies, expected=s.jobs)


def cases(settings: Settings) -> List[Case]:
    found = [Case("enqueue", "enqueue", "1. enqueue, one job per call", enqueue),
             Case("bulk", "bulk", "2. bulk enqueue, one call", bulk)]
    for n in settings.workers:
        found.append(Case(f"drain{n}", "drain", f"3. drain, {n} worker process"
                          + ("es" if n > 1 else ""), drain(n)))
    found += [
        Case("pickup", "pickup", f"4. pickup latency, idle worker ({settings.pickup_jobs} jobs)",
             pickup, rate=False),
        Case("claim-empty", "history", "5a. claim+complete, empty history", claim_empty),
        Case("claim-history", "history",
             f"5b. claim+complete, {settings.history_rows:,} completed retained", claim_history),
        Case("e2e", "e2e", "6. end to end, default worker settings", end_to_end),
    ]
    return found


FAMILIES = ("enqueue", "bulk", "drain", "pickup", "history", "e2e")
