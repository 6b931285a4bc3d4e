"""The seeded schedules of a fault-injection run: what each handler run does, which
fault comes next and when, which worker is stopped and how.

Everything is drawn from ``random.Random`` seeded by the run's seed (and, for a
handler, the job's number and attempt), so the same seed asks for the same behaviour;
the timing of real processes still differs from run to run.
"""
from __future__ import annotations

import enum
import random
from dataclasses import dataclass
from typing import Sequence, Tuple, TypeVar

T = TypeVar("T")


class Behaviour(enum.Enum):
    """What one handler run does."""

    RETURN = "return"                # a few ms of work, then returns
    RAISE = "raise"                  # raises RuntimeError
    SYSTEM_EXIT = "system_exit"      # raises SystemExit
    KEYBOARD_INTERRUPT = "keyboard_interrupt"  # raises KeyboardInterrupt
    SLOW = "slow"                    # works longer than the lease (renewals keep it)
    HANG = "hang"                    # blocks until cancelled (past its lease lifetime)


BEHAVIOURS: Tuple[Tuple[Behaviour, int], ...] = (
    (Behaviour.RETURN, 77), (Behaviour.RAISE, 10), (Behaviour.SYSTEM_EXIT, 2),
    (Behaviour.KEYBOARD_INTERRUPT, 2), (Behaviour.SLOW, 6), (Behaviour.HANG, 3))
# From this attempt on a handler returns, so that every job can finish in the drain
# that ends a run (QueueOptions.max_attempts leaves room for attempts lost to faults).
ALWAYS_RETURN_FROM = 5


def _weighted(rng: random.Random, table: Sequence[Tuple[T, int]]) -> T:
    return rng.choices([item for item, _ in table], [weight for _, weight in table])[0]


def behaviour(seed: int, n: int, attempt: int) -> Behaviour:
    """What run ``attempt`` of job number ``n`` does under ``seed``."""
    if attempt >= ALWAYS_RETURN_FROM:
        return Behaviour.RETURN
    return _weighted(random.Random(f"{seed}:{n}:{attempt}"), BEHAVIOURS)


def work_seconds(seed: int, n: int, attempt: int) -> float:
    """How long a returning handler works (0-30 ms)."""
    return random.Random(f"{seed}:{n}:{attempt}:work").uniform(0.0, 0.03)


class Stop(enum.Enum):
    """How the harness stops a worker process."""

    SIGTERM = "sigterm"            # handle_signals: a clean stop
    SIGINT = "sigint"              # handle_signals: a clean stop
    SIGINT_TWICE = "sigint_twice"  # handle_signals: a clean stop, then KeyboardInterrupt
    SIGTERM_EXIT = "sigterm_exit"  # SIGTERM handler calls sys.exit(0): SystemExit
    SIGINT_RAISE = "sigint_raise"  # Python's default SIGINT: KeyboardInterrupt


class Mode(enum.Enum):
    """How a worker process handles signals."""

    HANDLE_SIGNALS = "handle_signals"    # caravel_lite.worker.handle_signals
    EXIT_ON_SIGTERM = "exit_on_sigterm"  # signal(SIGTERM, sys.exit(0)); SIGINT default


STOPS = {Mode.HANDLE_SIGNALS: ((Stop.SIGTERM, 1), (Stop.SIGINT, 1), (Stop.SIGINT_TWICE, 2)),
         Mode.EXIT_ON_SIGTERM: ((Stop.SIGTERM_EXIT, 1), (Stop.SIGINT_RAISE, 1))}

# Proxy faults (PostgreSQL and MariaDB): kind and weight; windows last WINDOW seconds.
FAULTS = (("drop_reply", 50), ("reset", 20), ("blackhole", 15), ("refuse", 15))
WINDOW = (1.0, 6.0)
FAULT_GAP = (0.2, 1.0)
STOP_GAP = (1.0, 3.0)


@dataclass
class Schedule:
    """The run's stream of choices (one generator, so one seed gives one sequence)."""

    seed: int

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.faults = random.Random(f"{self.seed}:faults")

    def mode(self) -> Mode:
        return self.rng.choice(list(Mode))

    def stop_for(self, mode: Mode) -> Stop:
        return _weighted(self.rng, STOPS[mode])

    def stop_gap(self) -> float:
        return self.rng.uniform(*STOP_GAP)

    def second_sigint_after(self) -> float:
        return self.rng.uniform(0.1, 1.0)

    def fault(self) -> str:
        return _weighted(self.faults, FAULTS)

    def fault_gap(self) -> float:
        return self.faults.uniform(*FAULT_GAP)

    def window(self) -> float:
        return self.faults.uniform(*WINDOW)

    def pick(self, items: Sequence[T]) -> T:
        return self.faults.choice(list(items))
