"""``caravel-lite replay JOB_ID...`` replays those dead letters (any tenant);
``caravel-lite replay --queue Q [--failure F] [--since 1h] ...`` replays every dead
letter matching the filters (at least one filter, or ``--all``). A replay keeps the id
and payload, resets the attempts and makes the job due now; it can repeat side
effects. ``--dry-run`` says how many would be replayed and changes nothing."""
from __future__ import annotations

import argparse

from caravel_lite.cli import acting, common, operating
from caravel_lite.values import JobState


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("replay", help="replay dead letters, by id or by filter",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    acting.add_ids(cmd, nargs="*")
    operating.add_filters(cmd, state=False)
    cmd.add_argument("--all", action="store_true",
                     help="every dead letter (when no filter is given)")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    filters = operating.filters_of(args)
    acting.require_ids_or_filters(args, filters, "--queue, --failure, --since")
    with operating.AdminSession(args) as admin:
        if args.job_ids:
            return acting.on_ids(args, admin, "replayed", admin.replay,
                                 lambda state: state in (JobState.DEAD_LETTER,
                                                         JobState.CANCELLED),
                                 "only dead letters and cancelled jobs can be replayed")
        count = admin.replay_many(**filters, dry_run=args.dry_run)
    operating.print_count(args, count, "dead letter(s)", "replayed")
    return common.OK
