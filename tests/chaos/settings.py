"""The size of a fault-injection run (:mod:`tests.chaos.harness`)."""
from __future__ import annotations

from dataclasses import dataclass

from tests.chaos import plan


@dataclass(frozen=True)
class Settings:
    """The size of a run. Leases are short (2 s, renewed every 0.5 s, at most 5 s), so
    that handlers block past them within seconds and leases lost to a stop expire
    within the run."""

    seconds: float = 20.0
    workers: int = 3
    concurrency: int = 6
    initial_jobs: int = 500
    enqueue_per_second: float = 15.0
    lease: float = 2.0
    renewal: float = 0.5
    lifetime: float = 5.0
    max_attempts: int = 10
    shutdown_timeout: float = 3.0
    max_outage: float = 60.0
    drain_timeout: float = 40.0
    # A stopped worker that has not exited this long after its stop is killed (and the
    # run reports it): the shutdown timeout plus time for an outage's reconnects.
    exit_timeout: float = 20.0
    # The seeded mixes (tests.chaos.plan): what handlers do, which faults, which
    # ways of taking signals; "name=weight,...".
    behaviours: str = plan.BEHAVIOURS
    faults: str = plan.FAULTS
    modes: str = plan.MODES
