"""Timing, percentiles and the summary of several rounds: shared by every peer."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple


@dataclass
class Sample:
    """One measured round: ``count`` jobs in ``seconds`` of wall time, and optionally
    one latency per job (seconds)."""

    count: int
    seconds: float
    latencies: List[float] = field(default_factory=list)
    expected: Optional[int] = None  # jobs the round should have handled, when known
    # A scenario's own figure where a rate says little (idle CPU %, connections, a
    # ratio), the points a plot draws, and a line saying how it was measured.
    value: Optional[float] = None
    series: List[Tuple[float, float]] = field(default_factory=list)
    note: str = ""
    # The measuring process's CPU time over the timed span (all threads), where known.
    cpu_seconds: Optional[float] = None

    @property
    def rate(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else float("nan")

    @property
    def complete(self) -> bool:
        return self.expected is None or self.count == self.expected


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[int(rank) - 1]


def timed_each(action: Callable[[int], object], n: int,
               budget: Optional[float] = None) -> Sample:
    """Call ``action(i)`` n times, or until ``budget`` seconds have passed; total wall
    time and per-call latency (a sample cut short by the budget is incomplete)."""
    clock = time.perf_counter
    latencies = []
    start = clock()
    end = start + budget if budget is not None else None
    for i in range(n):
        before = clock()
        action(i)
        latencies.append(clock() - before)
        if end is not None and latencies and before > end:
            break
    return Sample(len(latencies), clock() - start, latencies, expected=n)


def timed_once(action: Callable[[], object], n: int) -> Sample:
    """Time one call that handles n jobs."""
    start = time.perf_counter()
    action()
    return Sample(n, time.perf_counter() - start, expected=n)


@dataclass
class Summary:
    """Medians over rounds, with the spread (min..max) of the rate."""

    rounds: int
    rate: float
    rate_min: float
    rate_max: float
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    incomplete: int  # rounds that handled fewer jobs than expected
    value: Optional[float] = None   # median of the rounds' values, when they have one
    note: str = ""                  # the first round's note
    samples: Sequence[Sample] = ()  # every round, for the plots

    @classmethod
    def of(cls, samples: Sequence[Sample]) -> "Summary":
        rates = [s.rate for s in samples]
        with_lat = [s for s in samples if s.latencies]
        p50 = p99 = None
        if with_lat:
            p50 = statistics.median(percentile(s.latencies, 50) for s in with_lat) * 1000
            p99 = statistics.median(percentile(s.latencies, 99) for s in with_lat) * 1000
        values = [s.value for s in samples if s.value is not None]
        return cls(len(samples), statistics.median(rates), min(rates), max(rates), p50, p99,
                   sum(1 for s in samples if not s.complete),
                   statistics.median(values) if values else None,
                   next((s.note for s in samples if s.note), ""), tuple(samples))
