"""How ``replay``, ``discard`` and ``delete`` act on a list of job ids: one line per id
(or one JSON object), the count at the end, ``--dry-run`` reading each job's state
instead of changing it. Exit 1 when some of the jobs could not be acted on."""
from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, Sequence

from caravel_lite.admin import QueueAdmin
from caravel_lite.cli import common, operating
from caravel_lite.values import JobState


def add_ids(parser: argparse.ArgumentParser, nargs: str = "+") -> None:
    parser.add_argument("job_ids", nargs=nargs, type=operating.job_id, metavar="JOB_ID")
    parser.add_argument("--dry-run", action="store_true",
                        help="say what would be done and change nothing")


def require_ids_or_filters(args: argparse.Namespace, filters: Dict[str, Any],
                           examples: str, with_ids: Sequence[str] = ()) -> None:
    """Check that the command names job ids or filters (or ``--all``), never both;
    ``with_ids`` are filters that may come with job ids (``--state``)."""
    chosen = {name for name, value in filters.items() if value is not None}
    if args.job_ids and (chosen - set(with_ids) or args.all):
        also = (f" (with {', '.join('--' + name for name in with_ids)} at most)"
                if with_ids else "")
        raise common.UsageError(f"give job ids{also} or filters, not both")
    if not args.job_ids and not chosen and not args.all:
        raise common.UsageError(f"give job ids, a filter ({examples} ...) or --all")


def on_ids(args: argparse.Namespace, admin: QueueAdmin, verb: str,
           act: Callable[[Any], bool], eligible: Callable[[JobState], bool],
           why_not: str) -> int:
    """Apply ``act`` to each id (or, with --dry-run, test ``eligible`` on its state)."""
    ids: Sequence[str] = list(operating.each_id(args.job_ids))
    done = 0
    for ident in ids:
        job = admin.job(ident)
        state = job.state.value if job is not None else None
        if args.dry_run:
            ok = job is not None and eligible(job.state)
        else:
            ok = act(ident)
        done += ok
        if args.json:
            operating.print_json({"job_id": ident, verb: ok, "dry_run": args.dry_run,
                                  "state": state})
        elif ok:
            print(f"{ident} {'would be ' if args.dry_run else ''}{verb}")
        else:
            reason = "no such job" if job is None else f"{state}: {why_not}"
            print(f"{ident} not {verb} ({reason})")
    return operating.acted_on(done, len(ids), "job", verb, args.dry_run)
