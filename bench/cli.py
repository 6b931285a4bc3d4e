"""python -m bench: choose databases, scenarios, peers and sizes; print; optionally write
docs/PERFORMANCE.md."""
from __future__ import annotations

import argparse
import dataclasses
import shlex
import sys
from typing import List, Optional

from bench import machine, peers, report, runner, scenarios, targets
from bench.settings import QUICK, Settings
from bench.table import render


def _names(raw: str, allowed, what: str) -> List[str]:
    chosen = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (choose from "
                         f"{', '.join(allowed)})")
    return chosen


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true",
                   help="small smoke run (proves the harness, numbers are noisy)")
    p.add_argument("--databases", default=",".join(targets.TARGETS),
                   help="comma-separated: %(default)s")
    p.add_argument("--scenarios", default=",".join(scenarios.FAMILIES),
                   help="comma-separated: %(default)s")
    p.add_argument("--peers", default=",".join(peers.PEERS), help="comma-separated: %(default)s")
    p.add_argument("--jobs", type=int, help="jobs per throughput scenario (full: 10000)")
    p.add_argument("--rounds", type=int, help="rounds per case, median reported (full: 3)")
    p.add_argument("--workers", help="drain process counts, comma-separated (default 1,2,4)")
    p.add_argument("--pickup-jobs", type=int, help="jobs for pickup latency (full: 200)")
    p.add_argument("--history", type=int, help="completed rows retained (full: 1000000)")
    p.add_argument("--claims", type=int, help="claims timed in scenario 5 (full: 2000)")
    p.add_argument("--write", metavar="PATH", help="also write the report (docs/PERFORMANCE.md)")
    p.add_argument("--busy-note", default="",
                   help="a warning printed at the top of the report (e.g. a busy machine)")
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    base = QUICK if args.quick else Settings()
    changes = {name: value for name, value in (
        ("jobs", args.jobs), ("rounds", args.rounds), ("pickup_jobs", args.pickup_jobs),
        ("history_rows", args.history), ("claim_jobs", args.claims)) if value is not None}
    if args.workers:
        changes["workers"] = tuple(int(n) for n in args.workers.split(","))
    return dataclasses.replace(base, **changes)


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    settings = settings_from(args)
    chosen_targets = [targets.TARGETS[k] for k in _names(args.databases, list(targets.TARGETS),
                                                         "database")]
    families = _names(args.scenarios, scenarios.FAMILIES, "scenario")
    chosen_cases = [c for c in scenarios.cases(settings) if c.family in families]
    peer_keys = _names(args.peers, list(peers.PEERS), "peer")
    load_before = machine.load_now()
    results = runner.run(settings, chosen_targets, chosen_cases, peer_keys)
    print(render(results))
    if args.write:
        command = "python -m bench " + " ".join(shlex.quote(a) for a in argv)
        with open(args.write, "w", encoding="utf-8") as out:
            out.write(report.build(results, command.strip(), load_before, args.busy_note))
        print(f"wrote {args.write}", file=sys.stderr)
    return 0
