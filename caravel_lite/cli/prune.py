"""``caravel-lite prune --older-than 7d``: delete finished jobs (``--states``, default
completed,dead_letter) that finished longer ago than that, of ``--queue`` only when
given, with their failure history, in batches (``--batch-size``, default 100 on SQLite
and 1000 elsewhere) with a pause after each one (on SQLite as long as it took, plus
2 ms; a quarter of that elsewhere), so that workers keep running. Waiting and leased
jobs are never deleted. Pruned idempotency keys lose their duplicate protection.
Progress: a bar on a terminal, plain lines when stderr is not one. ``--dry-run``
counts and changes nothing."""
from __future__ import annotations

import argparse
import sys
from typing import List, TextIO

from caravel_lite.admin import PruneProgress
from caravel_lite.cli import common, operating
from caravel_lite.values import JobState

BAR = 30


def _states(text: str) -> List[JobState]:
    parse = operating.state_choice
    return [parse(part) for part in text.split(",") if part.strip()]


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("prune", help="delete old finished jobs, in batches",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    cmd.add_argument("--older-than", type=operating.duration, required=True,
                     help="finished longer ago than this (7d, 12h ...)")
    cmd.add_argument("--states", type=_states, default=[JobState.COMPLETED, JobState.DEAD_LETTER],
                     help="comma-separated: completed, dead_letter (default both)")
    cmd.add_argument("--queue", help="only this queue")
    cmd.add_argument("--batch-size", type=int, default=None,
                     help="jobs per batch, 1..10000 "
                          "(default 100 on SQLite, 1000 elsewhere)")
    cmd.add_argument("--dry-run", action="store_true", help="count and change nothing")
    cmd.set_defaults(run=run)


class Reporter:
    """Progress on ``stream``: a bar redrawn in place on a terminal, else one line per
    batch."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.drawn = False

    def __call__(self, p: PruneProgress) -> None:
        if not self.tty:
            if p.batches:
                self.stream.write(f"batch {p.batches}: {p.deleted} of {p.total} deleted\n")
            else:
                self.stream.write(f"{p.total} job(s) to prune\n")
            self.stream.flush()
            return
        share = p.deleted / p.total if p.total else 1.0
        filled = int(share * BAR)
        self.stream.write(f"\r[{'#' * filled}{'.' * (BAR - filled)}] {share:4.0%} "
                          f"{p.deleted}/{p.total}")
        self.stream.flush()
        self.drawn = True

    def end(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()


def run(args: argparse.Namespace) -> int:
    reporter = Reporter(sys.stderr)
    with operating.AdminSession(args) as admin:
        try:
            count = admin.prune(args.older_than, states=args.states, queue=args.queue,
                                batch_size=args.batch_size, dry_run=args.dry_run,
                                progress=None if args.dry_run else reporter)
        finally:
            reporter.end()
    operating.print_count(args, count, "job(s)", "pruned")
    return common.OK
