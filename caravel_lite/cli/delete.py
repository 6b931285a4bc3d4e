"""``caravel-lite delete JOB_ID...`` deletes those jobs (any tenant) with their failure
history, unless leased (running); ``caravel-lite delete --queue Q [--failure F]
[--since 1h] ...`` deletes every dead letter matching the filters (at least one
filter, or ``--all``; ``--state completed`` for completed jobs instead), in batches
whose statements check the state and the filters again, so a dead letter replayed
meanwhile is kept. A deleted job's idempotency key is forgotten: the same key then
makes a new job. ``--dry-run`` says how many would be deleted and changes nothing."""
from __future__ import annotations

import argparse

from caravel_lite.cli import acting, common, operating
from caravel_lite.values import JobState


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("delete", help="delete jobs that are not running, by id or "
                                               "dead letters by filter",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    acting.add_ids(cmd, nargs="*")
    operating.add_filters(cmd)
    cmd.add_argument("--all", action="store_true",
                     help="every dead letter (when no other filter is given)")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    filters = {**operating.filters_of(args), "state": args.state}
    chosen = {k: v for k, v in filters.items() if v is not None}
    if args.job_ids and (chosen or args.all):
        raise common.UsageError("give job ids or filters, not both")
    if not args.job_ids and not chosen and not args.all:
        raise common.UsageError("give job ids, a filter (--queue, --failure, --since ...) "
                                "or --all")
    with operating.AdminSession(args) as admin:
        if args.job_ids:
            return acting.on_ids(args, admin, "deleted", admin.delete,
                                 lambda state: state is not JobState.LEASED,
                                 "a leased job is running")
        count = admin.delete_many(**filters, dry_run=args.dry_run)
    noun = "completed job(s)" if args.state is JobState.COMPLETED else "dead letter(s)"
    operating.print_count(args, count, noun, "deleted")
    return common.OK
