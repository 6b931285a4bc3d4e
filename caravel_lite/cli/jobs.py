"""``caravel-lite jobs``: jobs of every tenant, newest first, filtered by queue, state,
tenant, wire name, last failure and creation time; ``--limit`` per page (default 50),
``--after JOB_ID`` for the page after the one ending with that job (the next page's
command is printed on stderr). Payloads only with ``--show-payload``. Read-only.
``--json``: one object per job."""
from __future__ import annotations

import argparse
import sys

from caravel_lite.cli import common, operating


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("jobs", help="list jobs, newest first, with filters",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    operating.add_filters(cmd)
    cmd.add_argument("--limit", type=int, default=50, help="jobs per page, 1..1000 (default 50)")
    cmd.add_argument("--after", type=operating.job_id, metavar="JOB_ID",
                     help="list the jobs older than this one (the next page)")
    cmd.add_argument("--show-payload", action="store_true", help="include each job's payload")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with operating.AdminSession(args) as admin:
        page = admin.jobs(state=args.state, limit=args.limit, after=args.after,
                          include_payload=args.show_payload, **operating.filters_of(args))
    if args.json:
        for job in page:
            data = operating.plain(job)
            if not args.show_payload:
                del data["payload"]
            operating.print_json(data)
    else:
        headers = operating.SUMMARY_HEADERS + (("PAYLOAD",) if args.show_payload else ())
        operating.table(headers, [operating.summary_row(job) + (
            [job.payload] if args.show_payload else []) for job in page])
    if page.next_cursor is not None:
        sys.stderr.write(f"more: add --after {page.next_cursor}\n")
    return common.OK
