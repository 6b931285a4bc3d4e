"""The one interface every peer implements, and what a peer may answer instead.

Parent side: ``install`` (schema in a fresh database), ``enqueue_one``/``enqueue_bulk``,
``enqueue_one_keyed``, ``prefill``, ``prefill_sleep``, ``add_history``,
``claim_each``/``claim_timed``, ``enqueue_stamped``,
``enqueue_batch_stamped``/``enqueue_chain_stamped``. Worker-process side: ``drain``
(the first round's fastest loop, until empty), ``drain_run_once`` (the library's
run-one-job call in a loop until empty, as a cron script drains), ``drain_default``
(the library's worker with no tuning at all until ``expected`` jobs ran),
``drain_sleep`` (the worker at a given concurrency over sleeping jobs), and ``serve``
(a worker with the library's default settings until ``stop`` is set; handlers call
``bench.probe.hit``). Each drain returns how many jobs ran and sets ``last_done`` to
when the last handler finished.
A method a peer cannot honestly provide raises :class:`NotApplicable` with the reason,
which the table prints instead of a number.
"""
from __future__ import annotations

import importlib.util
import time
from typing import Any, Optional, Tuple

from bench.targets import Target
from bench.timing import Sample, timed_each

QUEUE = "bench"


class NotApplicable(Exception):
    """This peer does not do this (the message says why); nothing was measured."""


class Peer:
    name = "?"
    kinds: Tuple[str, ...] = ()        # sqlite, postgres, mysql
    requires: Tuple[str, ...] = ()     # importable modules the peer needs
    scenarios: Optional[Tuple[str, ...]] = None  # None: every scenario
    claim_reason = "n/a: no single-claim call"   # why claim_one/add_history are missing

    def __init__(self, target: Target) -> None:
        self.target = target

    @classmethod
    def unavailable(cls, kind: str) -> Optional[str]:
        """Why this peer cannot run on ``kind`` (None when it can)."""
        if kind not in cls.kinds:
            return "n/a"
        missing = [m for m in cls.requires if importlib.util.find_spec(m) is None]
        if missing:
            return "skipped: pip install " + " ".join(missing)
        return None

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        """Connect (in whichever process this runs)."""

    def install(self) -> None:
        """Create the peer's schema in the fresh database (parent, once per case)."""

    def close(self) -> None:
        pass

    # -- producer side ---------------------------------------------------------------
    def enqueue_one(self, i: int) -> None:
        raise NotApplicable("n/a")

    def enqueue_each(self, n: int, budget: Optional[float] = None) -> Sample:
        return timed_each(self.enqueue_one, n, budget)

    def enqueue_one_keyed(self, i: int) -> None:
        """Enqueue one job under an idempotency key of its own (distinct per i)."""
        raise NotApplicable("n/a")

    def enqueue_bulk(self, n: int) -> Sample:
        """Enqueue n jobs in one call/transaction, timed."""
        raise NotApplicable("not implemented")

    def prefill(self, n: int) -> None:
        """Fill the queue with n ready jobs as fast as the peer allows (not timed)."""
        try:
            self.enqueue_bulk(n)
        except NotApplicable:
            for i in range(n):
                self.enqueue_one(i)

    def enqueue_stamped(self) -> None:
        """Enqueue one job carrying ``time.time()`` for the handler to report."""
        raise NotApplicable("no worker")

    def enqueue_batch_stamped(self, n: int, sent: float) -> None:
        """Enqueue n no-op jobs as one batch whose on_complete callback carries ``sent``
        for its handler to report (bench.workflow_scenarios)."""
        raise NotApplicable("not measured")

    def enqueue_chain_stamped(self, n: int, sent: float) -> None:
        """Enqueue a chain of n no-op steps, the last carrying ``sent``."""
        raise NotApplicable("not measured")

    # -- history (scenario 5) --------------------------------------------------------
    def add_history(self, n: int, budget: Optional[float] = None) -> int:
        """Insert n finished jobs in bulk (untimed); stop starting new chunks once
        ``budget`` seconds are spent. Returns the rows inserted."""
        raise NotApplicable(self.claim_reason)

    def claim_one(self) -> None:
        """Claim one job and acknowledge it (fails if nothing was claimed)."""
        raise NotApplicable(self.claim_reason)

    def claim_each(self, n: int) -> Sample:
        return timed_each(lambda _i: self.claim_one(), n)

    def claim_timed(self) -> float:
        """Claim one job (timed, seconds) and acknowledge it (not timed)."""
        raise NotApplicable(self.claim_reason)

    def prune_finished(self) -> Tuple[int, str]:
        """Delete the finished jobs older than a day: (rows deleted, the call used)."""
        raise NotApplicable("n/a: no prune")

    # -- worker-process side ---------------------------------------------------------
    def drain(self) -> int:
        raise NotApplicable("n/a")

    def drain_run_once(self, budget: Optional[float] = None) -> int:
        """Run the queued jobs one call per job until the queue is empty (or ``budget``
        seconds are spent), as a cron script does; returns how many ran."""
        raise NotApplicable("n/a")

    def serve(self, stop: Any) -> None:
        raise NotApplicable("no worker")

    def drain_default(self, expected: int) -> int:
        raise NotApplicable("no worker")

    # -- concurrency (jobs that sleep) -----------------------------------------------
    def check_concurrency(self) -> None:
        """Raise NotApplicable when the peer cannot run jobs concurrently (parent)."""
        if type(self).drain_sleep is Peer.drain_sleep:
            raise NotApplicable("no worker")

    def prefill_sleep(self, n: int, seconds: float) -> None:
        raise NotApplicable("no worker")

    def drain_sleep(self, expected: int, concurrency: int) -> int:
        raise NotApplicable("no worker")


def stamped() -> float:
    return time.time()
