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
from typing import Optional, Sequence, Tuple, TypeVar

T = TypeVar("T")


class Behaviour(enum.Enum):
    """What one handler run does."""

    RETURN = "return"                # a few ms of work, then returns
    RAISE = "raise"                  # raises RuntimeError
    SYSTEM_EXIT = "system_exit"      # raises SystemExit
    KEYBOARD_INTERRUPT = "keyboard_interrupt"  # raises KeyboardInterrupt
    SLOW = "slow"                    # works longer than the lease (renewals keep it)
    HANG = "hang"                    # blocks until cancelled (past its lease lifetime)


# Weights, as "name=weight,..." (so that a run can be narrowed from the command line).
BEHAVIOURS = "return=77,raise=10,system_exit=2,keyboard_interrupt=2,slow=6,hang=3"
# From this attempt on a handler returns, so that every job can finish in the drain
# that ends a run (QueueOptions.max_attempts leaves room for attempts lost to faults).
ALWAYS_RETURN_FROM = 5


def _weighted(rng: random.Random, table: Sequence[Tuple[T, int]]) -> T:
    return rng.choices([item for item, _ in table], [weight for _, weight in table])[0]


def weights(text: str, allowed: Sequence[str]) -> Tuple[Tuple[str, int], ...]:
    """``"a=3,b=1"`` as ((a, 3), (b, 1)); a name not in ``allowed`` is an error."""
    table = []
    for item in text.split(","):
        name, _, weight = item.strip().partition("=")
        if name not in allowed or not weight.isdigit():
            raise ValueError(f"bad weight {item!r}: NAME=INTEGER with NAME one of "
                             f"{', '.join(allowed)}")
        table.append((name, int(weight)))
    return tuple(table)


def behaviour(seed: int, n: int, attempt: int, table: str = BEHAVIOURS) -> Behaviour:
    """What run ``attempt`` of job number ``n`` does under ``seed``."""
    if attempt >= ALWAYS_RETURN_FROM:
        return Behaviour.RETURN
    chosen = weights(table, [b.value for b in Behaviour])
    return Behaviour(_weighted(random.Random(f"{seed}:{n}:{attempt}"), chosen))


def work_seconds(seed: int, n: int, attempt: int) -> float:
    """How long a returning handler works (0-300 ms: long enough that the slots stay
    busy with a modest number of jobs per second, which is when completions wait to
    be written in batches)."""
    return random.Random(f"{seed}:{n}:{attempt}:work").uniform(0.0, 0.3)


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
FAULTS = "drop_reply=40,reset=15,blackhole=15,refuse=10,stall=20"
FAULT_KINDS = ("drop_reply", "reset", "blackhole", "refuse", "stall")
# A stall: the jobs table locked by another session this long, so that the worker's
# claims, renewals and completions wait (and handlers' results do not): shorter than
# the lease's margin, so a worker that keeps its promises loses nothing to it.
STALL = (0.3, 0.9)
# Whose reply a drop_reply discards: the next request, or the next one whose SQL holds
# the text (the claim's UPDATE, the enqueue's INSERT, the completion, the renewal, the
# hand-back); "+1" drops the reply to the request after it on that connection (the
# COMMIT of a short transaction).
WORKER_DROPS = (("any", None), ("claim", b"attempts = attempts + 1"),
                ("complete", b"SET state = 'completed'"),
                ("renew", b"renewals = renewals + 1"),
                ("release", b"attempts = attempts - 1"))
ENQUEUER_DROPS = (("enqueue", b"INSERT INTO caravel_jobs"),)
MODES = "handle_signals=1,exit_on_sigterm=1"
WINDOW = (1.0, 6.0)
FAULT_GAP = (0.2, 1.0)
STOP_GAP = (1.0, 3.0)


@dataclass
class Schedule:
    """The run's stream of choices (one generator, so one seed gives one sequence)."""

    seed: int
    fault_weights: str = FAULTS
    mode_weights: str = MODES

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.faults = random.Random(f"{self.seed}:faults")
        self._faults = weights(self.fault_weights, FAULT_KINDS)
        self._modes = weights(self.mode_weights, [m.value for m in Mode])

    def mode(self) -> Mode:
        return Mode(_weighted(self.rng, self._modes))

    def stop_for(self, mode: Mode) -> Stop:
        return _weighted(self.rng, STOPS[mode])

    def stop_gap(self) -> float:
        return self.rng.uniform(*STOP_GAP)

    def second_sigint_after(self) -> float:
        return self.rng.uniform(0.1, 1.0)

    def fault(self) -> str:
        return _weighted(self.faults, self._faults)

    def fault_gap(self) -> float:
        return self.faults.uniform(*FAULT_GAP)

    def window(self) -> float:
        return self.faults.uniform(*WINDOW)

    def drop_target(self, enqueuer: bool) -> Tuple[str, Optional[bytes], int]:
        label, match = self.faults.choice(ENQUEUER_DROPS if enqueuer else WORKER_DROPS)
        after = 1 if match is not None and self.faults.random() < 0.3 else 0
        return (label + "+1" if after else label), match, after

    def stall(self) -> float:
        return self.faults.uniform(*STALL)

    def pick(self, items: Sequence[T]) -> T:
        return self.faults.choice(list(items))
