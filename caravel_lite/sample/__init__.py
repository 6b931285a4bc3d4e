"""The runnable sample worker: three jobs add 1, 2 and 3 to a report.

A second handler (``TallyQuantity``, ``--enqueue-tallies``, ``--tally-report``) records
the same quantities exactly once without any check of its own: its write and the job's
completion commit together in ``ctx.transaction()``, in the queue's database.

``python -m caravel_lite.sample FLAG`` (see :mod:`caravel_lite.sample.commands` and
docs/SAMPLE.md). The sample keeps its queue and its results in two databases it never
creates on its own: ``--migrate`` applies both sets of migrations explicitly, like any
caravel_lite application would.
"""
from __future__ import annotations

from dataclasses import dataclass

QUEUE = "synthetic-quantities"
TENANT = "synthetic"
WIRE_NAME = "synthetic.quantity.v1"
QUANTITIES = (1, 2, 3)
TALLY_WIRE_NAME = "synthetic.tally.v1"

# Exit code of a worker that the crash hook stopped right after saving its result.
CRASH_EXIT_CODE = 73


@dataclass(frozen=True)
class RecordQuantity:
    """Add ``quantity`` (1..3) to the sample's report."""

    quantity: int


@dataclass(frozen=True)
class TallyQuantity:
    """Add ``quantity`` (1..3) to the sample's tallies, exactly once."""

    quantity: int


__all__ = ["QUEUE", "TENANT", "WIRE_NAME", "QUANTITIES", "CRASH_EXIT_CODE",
           "RecordQuantity", "TALLY_WIRE_NAME", "TallyQuantity"]
