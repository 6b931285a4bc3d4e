"""Issue 26's workflow scenarios: a batch of 1,000 no-op jobs with an on_complete
callback, and a chain of 100 no-op steps, each enqueued in one call while an idle
worker with the library's defaults is already running; the figure is the time from
the start of the enqueue call until the callback (the last step) began.

The worker runs in its own process and is warmed up first by one job waited for, so
its start-up is not counted; its pickup of the first job (its idle wait) is, as it is
for a user. The callback's (last step's) job carries the enqueue's start time and
its handler reports the delay through :mod:`bench.probe`.
"""
from __future__ import annotations

import time
from typing import Callable, List

from bench.case import Case, needs
from bench.peers.base import Peer
from bench.processes import serving
from bench.settings import Settings
from bench.timing import Sample

BATCH_JOBS = 1_000   # the sizes, the same in --quick runs
CHAIN_STEPS = 100


def _timed(method: str, n: int, jobs: int) -> Callable[[Peer, Settings], Sample]:
    def run(peer: Peer, s: Settings) -> Sample:
        needs(peer, method, "not measured")
        with serving(type(peer), peer.target) as served:
            peer.enqueue_stamped()
            served.next_latency(s.timeout)  # warm-up: the worker is consuming
            sent = time.time()
            getattr(peer, method)(n, sent)
            enqueued = time.time() - sent
            latency = served.next_latency(s.timeout)
        return Sample(jobs, latency, value=latency, expected=jobs,
                      note=f"{latency:.2f} s from the enqueue call to the last job's "
                           f"start, {enqueued:.2f} s of it in the enqueue call")
    return run


def cases() -> List[Case]:
    return [
        Case("batch1000", "batch", f"batch of {BATCH_JOBS:,} jobs + on_complete, default "
             f"worker (s to callback)",
             _timed("enqueue_batch_stamped", BATCH_JOBS, BATCH_JOBS + 1),
             unit="s", one_round=True),
        Case("chain100", "chain", f"chain of {CHAIN_STEPS} steps, default worker "
             f"(s to last step)",
             _timed("enqueue_chain_stamped", CHAIN_STEPS, CHAIN_STEPS),
             unit="s", one_round=True),
    ]
