"""Issue 13's history scenarios: what retained finished rows cost a claim, and what a
prune of many finished rows does to the claims running beside it."""
from __future__ import annotations

import statistics
import time
from typing import List, Tuple

from bench.case import needs
from bench.peers.base import Peer
from bench.processes import in_background
from bench.settings import Settings
from bench.timing import Sample, percentile

PACE = 0.005     # seconds: the claim loop beside a prune runs at most every 5 ms
BEFORE = 2.0     # seconds of claims timed before the prune starts
AFTER = 1.0      # and after it returned


WARM = 50        # claims run untimed first (statement caches, the first round trips)


def _claims(peer: Peer, n: int) -> List[float]:
    peer.prefill(n + WARM)
    for _ in range(WARM):
        peer.claim_timed()
    return [peer.claim_timed() for _ in range(n)]


def claim_history(peer: Peer, s: Settings) -> Sample:
    """In one database: ``claim_jobs`` claims timed on an empty history, then the same
    after ``history_for(kind)`` completed rows were added in bulk (and the tables
    analysed). Latencies: the claims with history; value: median claim time with
    history over median claim time without (the median, because on a shared machine a
    few descheduled calls move the mean more than the table does; both means are in the
    note)."""
    needs(peer, "claim_timed", peer.claim_reason)
    wanted = s.history_for(peer.target.kind)
    empty = _claims(peer, s.claim_jobs)
    filled = time.monotonic()
    rows = peer.add_history(wanted, s.fill_budget)
    filled = time.monotonic() - filled
    started = time.perf_counter()
    full = _claims(peer, s.claim_jobs)
    elapsed = time.perf_counter() - started
    ratio = percentile(full, 50) / percentile(empty, 50)
    return Sample(len(full), elapsed, full, expected=s.claim_jobs, value=ratio,
                  note=(f"{rows:,} completed rows" + (
                      f" (of {wanted:,}: the {s.fill_budget:.0f} s budget to insert them ran out)"
                      if rows < wanted else "") + f" inserted in {filled:.0f} s; claim mean "
                        f"{statistics.mean(empty) * 1e3:.3f} ms empty, "
                        f"{statistics.mean(full) * 1e3:.3f} ms with history; p50 "
                        f"{percentile(empty, 50) * 1e3:.3f} / "
                        f"{percentile(full, 50) * 1e3:.3f} ms"))


REFILL = 2_000    # pending jobs added (untimed) whenever the claim loop has used them up


class _ClaimLoop:
    """Claims one pre-enqueued job at a time and completes it, timing both apart; a
    claim or completion that fails (SQLite busy past its timeout) counts its time."""

    def __init__(self, peer: Peer) -> None:
        self.peer = peer
        self.pending = 0
        self.failures = 0
        self.completions: List[float] = []

    def once(self) -> float:
        if self.pending == 0:
            self.peer.prefill(REFILL)
            self.pending = REFILL
        self.pending -= 1
        started = time.perf_counter()
        try:
            claim = self.peer.claim_timed()
        except Exception:
            self.failures += 1
            self.pending = 0  # the failed claim may have left jobs behind: refill
            return time.perf_counter() - started
        self.completions.append(time.perf_counter() - started - claim)
        return claim


def prune_under_load(peer: Peer, s: Settings) -> Sample:
    """``prune_rows`` finished rows retained; a prune of all of them runs in another
    process while this one claims and completes one pre-enqueued job every ``PACE`` at
    most. Latencies: the claims that started while the prune ran; value: their p99 (ms);
    series: (seconds since the prune started, claim ms) for every claim; seconds: how
    long the prune ran (what the plot shades)."""
    needs(peer, "prune_finished", "n/a: no prune")
    rows = peer.add_history(s.prune_rows, s.fill_budget)
    loop = _ClaimLoop(peer)
    series: List[Tuple[float, float]] = []
    during: List[float] = []

    def claim_for(until: float, t0: float) -> None:
        while time.monotonic() < until:
            began = time.monotonic()
            series.append((began - t0, loop.once() * 1e3))
            time.sleep(PACE)

    with in_background(type(peer), peer.target, "prune_finished") as prune:
        loop.once()  # fills the first pending jobs before anything is timed
        warm_until = time.monotonic() + BEFORE
        claim_for(warm_until, warm_until)
        t0 = prune.start()
        loop.completions.clear()
        deadline = t0 + s.prune_budget
        outcome = None
        while outcome is None and time.monotonic() < deadline:
            began = time.monotonic()
            seconds = loop.once()
            series.append((began - t0, seconds * 1e3))
            during.append(seconds)
            time.sleep(PACE)
            outcome = prune.result()
        completions = list(loop.completions) or [0.0]
        if outcome is None:
            note = (f"prune of {rows:,} rows still running after {s.prune_budget:.0f} s "
                    "(stopped measuring)")
            ended = time.monotonic()
        else:
            (pruned, api), _, ended = outcome
            note = f"{api}: {pruned:,} rows in {ended - t0:.1f} s"
            claim_for(time.monotonic() + AFTER, t0)
    if not during:
        raise RuntimeError("no claim ran during the prune")
    note += (f"; {len(during)} claims during it, p50 {percentile(during, 50) * 1e3:.1f} ms, "
             f"max {max(during) * 1e3:.0f} ms; completions p99 "
             f"{percentile(completions, 99) * 1e3:.1f} ms"
             + (f"; {loop.failures} claims failed" if loop.failures else ""))
    return Sample(len(during), ended - t0, during,
                  value=percentile(during, 99) * 1e3, series=series, note=note)
