"""``caravel-lite cancel JOB_ID...`` cancels those jobs (any tenant): a waiting or
delayed job becomes cancelled at once; a running (leased) one gets a cancel request,
which its worker sees within a second: its handler is told to stop and the job ends
cancelled whatever the handler then does (a job whose worker is gone ends cancelled
when its lease expires). ``caravel-lite cancel --queue Q [--state S] [--tenant T]
[--since 1h] ...`` cancels every pending and leased job matching the filters (at least
one filter, or ``--all``), in batches whose statements check the state and the
filters again. ``--dry-run`` says how many would be cancelled and changes nothing.
Cancelled jobs keep their idempotency keys and can be replayed."""
from __future__ import annotations

import argparse

from caravel_lite.admin.control import CANCELLABLE
from caravel_lite.cli import acting, common, operating


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("cancel", help="cancel waiting or running jobs, by id or "
                                               "by filter", description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    acting.add_ids(cmd, nargs="*")
    operating.add_filters(cmd)
    cmd.add_argument("--all", action="store_true",
                     help="every pending and leased job (when no filter is given)")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    filters = operating.filters_of(args)
    filters["state"] = args.state
    acting.require_ids_or_filters(args, filters, "--queue, --tenant, --since")
    with operating.AdminSession(args) as admin:
        if args.job_ids:
            return acting.on_ids(args, admin, "cancelled", admin.cancel,
                                 lambda state: state in CANCELLABLE,
                                 "only pending and leased jobs can be cancelled")
        count = admin.cancel_many(**filters, dry_run=args.dry_run, everything=args.all)
    operating.print_count(args, count, "job(s)", "cancelled")
    return common.OK
