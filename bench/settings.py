"""What one run measures: sizes, rounds and selections (full and --quick presets)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


@dataclass(frozen=True)
class Settings:
    jobs: int = 10_000            # scenarios 1, 2, 3 and 6
    rounds: int = 3
    workers: Tuple[int, ...] = (1, 2, 4)
    pickup_jobs: int = 200        # scenario 4
    pickup_gap: float = 0.1       # max random pause before each pickup job (s)
    history_rows: int = 1_000_000  # scenario 5
    claim_jobs: int = 2_000       # claims timed in scenario 5
    timeout: float = 300.0        # per worker wait, seconds
    quick: bool = False


QUICK = Settings(jobs=500, rounds=2, pickup_jobs=20, history_rows=20_000, claim_jobs=200,
                 timeout=120.0, quick=True)
