"""``caravel-lite chains QUEUE`` and ``caravel-lite batches QUEUE``: one page of the
queue's chains or batches, newest first: id, tenant, jobs, finished (a chain: steps
completed; a batch: jobs counted final, and how many of them failed), the jobs by
state (``held``: a chain's steps waiting for the one before), created and closed.
``--after ID`` pages on; ``--json``: one object per chain or batch. Read-only."""
from __future__ import annotations

import argparse

from caravel_lite.cli import common, operating


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    for name, what in (("chains", "a queue's chains and their steps by state"),
                       ("batches", "a queue's batches, their jobs by state and callbacks")):
        cmd = subparsers.add_parser(name, help=what, description=__doc__.replace("``", ""))
        operating.add_database_and_json(cmd)
        cmd.add_argument("queue", help="the queue")
        cmd.add_argument("--limit", type=int, default=50, help="at most this many (1-200)")
        cmd.add_argument("--after", default=None, help="the last id of the previous page")
        cmd.set_defaults(run=run, listing=name)


def _states(counts: "dict[str, int]") -> str:
    return ",".join(f"{state}={n}" for state, n in sorted(counts.items())) or "-"


def run(args: argparse.Namespace) -> int:
    with operating.AdminSession(args) as admin:
        page = (admin.chains if args.listing == "chains" else admin.batches)(
            args.queue, limit=args.limit, after=args.after)
    if args.json:
        for found in page.workflows:
            operating.print_json(found)
        return common.OK
    batches = args.listing == "batches"
    operating.table(
        ("ID", "TENANT", "JOBS", "FINISHED") + (("FAILED",) if batches else ())
        + ("STATES", "CREATED", "CLOSED"),
        [(w.workflow_id, w.tenant_id, w.total, w.finished)
         + ((w.failed,) if batches else ())
         + (_states(w.counts), w.created_at.isoformat(timespec="seconds"),
            w.closed_at.isoformat(timespec="seconds") if w.closed_at else "open")
         for w in page.workflows], right=(2, 3, 4) if batches else (2, 3))
    if page.next_cursor is not None:
        print(f"more: --after {page.next_cursor}")
    return common.OK
