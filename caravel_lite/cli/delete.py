"""``caravel-lite delete JOB_ID...`` deletes those jobs (any tenant) with their failure
history, unless leased (running), and with ``--state`` only if each is still in
that state (``delete ID --state dead``: a dead letter another operator replayed since
it was listed is kept); ``caravel-lite delete --queue Q [--failure F]
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
    acting.require_ids_or_filters(args, filters, "--queue, --failure, --since",
                                  with_ids=("state",))
    if args.job_ids and args.state is JobState.LEASED:
        raise common.UsageError("--state: a leased job is running and cannot be deleted")
    with operating.AdminSession(args) as admin:
        if args.job_ids:
            seen = args.state
            # The statement checks the state again: what --dry-run reads may change.
            return acting.on_ids(args, admin, "deleted",
                                 lambda ident: admin.delete(ident, state=seen),
                                 lambda state: state is not JobState.LEASED
                                 and (seen is None or state is seen),
                                 "a leased job is running" if seen is None
                                 else f"not {seen.value}")
        count = admin.delete_many(**filters, dry_run=args.dry_run,
                                  everything=args.all)
    noun = "completed job(s)" if args.state is JobState.COMPLETED else "dead letter(s)"
    operating.print_count(args, count, noun, "deleted")
    return common.OK
