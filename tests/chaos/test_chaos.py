"""The short fault-injection run of the whole worker, in CI (#22): on each database
(SQLite without the proxy: signals and handler faults only), one seeded run of about
15 s of faults and stops, then a drain, then every invariant of
:mod:`tests.chaos.invariants`. On failure the message holds the seed and each broken
invariant with job ids; ``CARAVEL_CHAOS_SEED=N`` replays that seed's schedules
(``python -m bench.chaos`` runs them for as long as asked)."""
from __future__ import annotations

import os
import random

import pytest

from tests.chaos import harness

SHORT = harness.Settings(seconds=15.0, initial_jobs=400, enqueue_per_second=10.0,
                         drain_timeout=25.0)


def _seed() -> int:
    raw = os.environ.get("CARAVEL_CHAOS_SEED")
    return int(raw) if raw else random.SystemRandom().randrange(1, 1_000_000)


@pytest.mark.slow
@pytest.mark.faults
def test_the_worker_keeps_its_promises_under_faults(backend, db_url, tmp_path):
    seed = _seed()
    result = harness.run(backend, db_url, seed, SHORT, tmp_path / "chaos")
    text = harness.describe(result) + f"\n  records and worker logs: {tmp_path / 'chaos'}"
    print(text)
    assert result.ok, text
    assert result.runs >= result.jobs > SHORT.initial_jobs / 2  # it did run the jobs
