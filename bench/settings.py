"""What one run measures: sizes, rounds and selections (full and --quick presets).

Every scenario is bounded: by its job count and, where a slow subject could run long,
by a time budget after which it stops and reports what it measured (the table says
"incomplete" when a budget cut a round short).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Settings:
    jobs: int = 3_000             # enqueue, drain and default-drain scenarios
    rounds: int = 3               # the one-process drains and enqueue; the rest run once
    workers: Tuple[int, ...] = (1, 2, 4)   # worker processes for the drain scenarios
    pickup_jobs: int = 100        # pickup latency
    pickup_gap: float = 0.1       # max random pause before each pickup job (s)
    pickup_budget: float = 20.0   # seconds at most per pickup round
    history_rows: int = 10_000_000  # completed rows retained, PostgreSQL
    history_rows_other: int = 1_000_000  # the same on SQLite and MariaDB
    claim_jobs: int = 2_000       # claims timed on the empty and on the full table
    sleep_jobs: int = 1_000       # jobs of the concurrency scenario
    sleep_seconds: float = 0.05   # what each of them sleeps
    concurrencies: Tuple[int, ...] = (10, 50)
    idle_seconds: float = 30.0    # CPU of an idle caravel_lite worker is read over this long
    idle_peer_seconds: float = 5.0   # and of the other queues' workers (context only)
    connection_jobs: int = 1_000  # sleeping jobs run while connections are counted
    connection_concurrency: int = 50
    fill_budget: float = 240.0    # seconds at most to insert history rows (then fewer)
    prune_rows: int = 1_000_000   # finished rows a prune removes under load
    prune_budget: float = 120.0   # seconds of claims timed during one prune at most
    drain_budget: float = 30.0    # seconds at most per drain round (then: incomplete)
    timeout: float = 300.0        # per worker wait, seconds
    baseline_rounds: int = 5      # --baseline: rounds of each side per scenario
    import_runs: int = 20         # --baseline: whole-process imports timed per command
    quick: bool = False

    def history_for(self, kind: str) -> int:
        return self.history_rows if kind == "postgres" else self.history_rows_other


QUICK = Settings(jobs=500, rounds=1, pickup_jobs=20, pickup_budget=15.0,
                 history_rows=20_000, history_rows_other=20_000, claim_jobs=200,
                 sleep_jobs=200, fill_budget=60.0, idle_seconds=3.0, idle_peer_seconds=3.0,
                 connection_jobs=200, prune_rows=20_000, prune_budget=60.0, drain_budget=20.0,
                 timeout=120.0, baseline_rounds=2, import_runs=5,
                 quick=True)
