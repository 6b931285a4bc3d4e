"""``caravel-lite discard JOB_ID...`` moves those waiting jobs (PENDING, any tenant) to
the dead letters with the failure ``discarded``, so that they never run unless
replayed; ``caravel-lite discard --queue Q [--tenant T] [--since 1h] ...`` discards
every pending job matching the filters (at least one filter, or ``--all``), in batches
whose statements check the state and the filters again, so a job claimed meanwhile
runs and is not discarded. A leased (running) job cannot be discarded. ``--dry-run``
says how many would be discarded and changes nothing."""
from __future__ import annotations

import argparse

from caravel_lite.cli import acting, common, operating
from caravel_lite.values import JobState


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("discard", help="dead-letter waiting jobs without running "
                                                "them, by id or by filter",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    acting.add_ids(cmd, nargs="*")
    operating.add_filters(cmd, state=False)
    cmd.add_argument("--all", action="store_true",
                     help="every pending job (when no filter is given)")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    filters = operating.filters_of(args)
    acting.require_ids_or_filters(args, filters, "--queue, --tenant, --since")
    with operating.AdminSession(args) as admin:
        if args.job_ids:
            return acting.on_ids(args, admin, "discarded", admin.discard,
                                 lambda state: state is JobState.PENDING,
                                 "only waiting jobs can be discarded")
        count = admin.discard_many(**filters, dry_run=args.dry_run,
                                   everything=args.all)
    operating.print_count(args, count, "pending job(s)", "discarded")
    return common.OK
