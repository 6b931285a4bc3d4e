"""``caravel-lite prune --older-than 7d``: delete finished jobs (``--states``, default
completed,dead_letter,cancelled) that finished longer ago than that, of ``--queue`` only when
given, with their failure history, in batches (``--batch-size``, default 100 on SQLite
and 1000 elsewhere) with a pause after each one (on SQLite as long as it took, plus
2 ms; a quarter of that elsewhere), so that workers keep running. Waiting and leased
jobs are never deleted. Pruned idempotency keys lose their duplicate protection.
Progress: a bar on a terminal, plain lines when stderr is not one. ``--dry-run``
counts and changes nothing.

``--scheduler MODULE:ATTR`` names the application's QueueScheduler (or a callable
returning one): an ``--older-than`` shorter than the longest interval or catch-up window
of its schedules on the pruned queues is refused (exit 2), since a slot whose job is
pruned while a scheduler still looks at it is enqueued again. Without it no schedule is
known and no age is refused."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional, TextIO

from caravel_lite.admin import PruneProgress
from caravel_lite.admin.retention import FINISHED
from caravel_lite.cli import common, operating
from caravel_lite.errors import InvalidField
from caravel_lite.scheduler import QueueScheduler
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
    cmd.add_argument("--states", type=_states, default=list(FINISHED),
                     help="comma-separated: completed, dead_letter (dead), cancelled "
                          "(default all three)")
    cmd.add_argument("--queue", help="only this queue")
    cmd.add_argument("--batch-size", type=int, default=None,
                     help="jobs per batch, 1..10000 "
                          "(default 100 on SQLite, 1000 elsewhere)")
    cmd.add_argument("--dry-run", action="store_true", help="count and change nothing")
    cmd.add_argument("--scheduler", default=None, metavar="MODULE:ATTR",
                     help="the application's QueueScheduler (or a callable returning one): "
                          "refuse an --older-than that would let its slots run again")
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


def _schedules(args: argparse.Namespace) -> Optional[QueueScheduler]:
    """The --scheduler's QueueScheduler, only asked how long its keys must be kept (its
    own database is closed again: it is not used)."""
    if args.scheduler is None:
        return None
    from caravel_lite.cli.scheduler import load_scheduler
    scheduler = load_scheduler(args, args.scheduler)
    common.close_quietly(scheduler.queue.db)
    return scheduler


def run(args: argparse.Namespace) -> int:
    scheduler = _schedules(args)
    reporter = Reporter(sys.stderr)
    with operating.AdminSession(args) as admin:
        try:
            count = admin.prune(args.older_than, states=args.states, queue=args.queue,
                                batch_size=args.batch_size, dry_run=args.dry_run,
                                progress=None if args.dry_run else reporter,
                                scheduler=scheduler)
        except InvalidField as exc:
            if exc.field != "older_than":
                raise
            reason = str(exc).split(": ", 1)[1]
            raise common.UsageError(f"--older-than {reason}") from None
        finally:
            reporter.end()
    operating.print_count(args, count, "job(s)", "pruned")
    return common.OK
