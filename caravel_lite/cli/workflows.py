"""``caravel-lite chains QUEUE`` and ``caravel-lite batches QUEUE``: one page of the
queue's chains or batches, newest first: id, tenant, jobs, finished (a chain: steps
completed; a batch: jobs counted final, and how many of them failed), the jobs by
state (``held``: a chain's steps waiting for the one before), created and closed.
``--after ID`` pages on; ``--json``: one object per chain or batch. Read-only.

``caravel-lite cancel-chain CHAIN_ID...`` cancels what is left of those chains (any
tenant): a waiting step is cancelled at once, a running one gets a cancel request its
worker honours, the held steps after it end cancelled. One line per chain (or one
JSON object); ``--dry-run`` says how many steps each would cancel and changes
nothing. Exit 1 when a chain had nothing left to cancel or is unknown."""
from __future__ import annotations

import argparse
from typing import List

from caravel_lite.cli import common, operating
from caravel_lite.workflows.values import WorkflowKind

# Each command's own paragraph is its description.
assert __doc__ is not None
LISTING, CANCEL_CHAIN = __doc__.split("\n\n", 1)


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    for name, what in (("chains", "a queue's chains and their steps by state"),
                       ("batches", "a queue's batches, their jobs by state and callbacks")):
        cmd = subparsers.add_parser(name, help=what, description=LISTING.replace("``", ""))
        operating.add_database_and_json(cmd)
        cmd.add_argument("queue", help="the queue")
        cmd.add_argument("--limit", type=int, default=50, help="at most this many (1-200)")
        cmd.add_argument("--after", default=None, help="the last id of the previous page")
        cmd.set_defaults(run=run, listing=name)
    cmd = subparsers.add_parser(
        "cancel-chain", help="cancel what is left of chains (their pending, running and "
                             "held steps)", description=CANCEL_CHAIN.replace("``", ""))
    operating.add_database_and_json(cmd)
    cmd.add_argument("chain_ids", nargs="+", type=_chain_id, metavar="CHAIN_ID")
    cmd.add_argument("--dry-run", action="store_true",
                     help="say how many steps would be cancelled and change nothing")
    cmd.set_defaults(run=cancel_chains)


def _chain_id(text: str) -> str:
    try:
        return operating.job_id(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"not a chain id: {text!r}") from None


def cancel_chains(args: argparse.Namespace) -> int:
    ids: List[str] = list(operating.each_id(args.chain_ids))
    done = 0
    with operating.AdminSession(args) as admin:
        for ident in ids:
            found = admin.workflow(ident)
            chain = found is not None and found.kind is WorkflowKind.CHAIN
            steps = admin.cancel_chain(ident, dry_run=args.dry_run) if chain else 0
            done += steps > 0
            if args.json:
                operating.print_json({"chain_id": ident, "cancelled": steps,
                                      "dry_run": args.dry_run})
            elif steps:
                print(f"{ident}: {steps} step(s) {'would be ' if args.dry_run else ''}"
                      f"cancelled")
            else:
                reason = ("no such chain" if found is None else
                          "a batch, not a chain" if not chain else "nothing left to cancel")
                print(f"{ident} not cancelled ({reason})")
    return operating.acted_on(done, len(ids), "chain", "cancelled", args.dry_run)


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
