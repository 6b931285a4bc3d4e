"""python -m bench: choose databases, scenarios, peers and sizes; print; optionally write
docs/PERFORMANCE.md (with the target table and, when matplotlib is installed, plots)."""
from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import shlex
import sys
from typing import List, Optional

from bench import baseline, baseline_table, machine, peers, report, runner, scenarios, targets
from bench.settings import QUICK, Settings
from bench.table import render


def _names(raw: str, allowed, what: str) -> List[str]:
    chosen = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in allowed]
    if unknown:
        raise SystemExit(f"unknown {what}: {', '.join(unknown)} (choose from "
                         f"{', '.join(allowed)})")
    return chosen


def _ints(raw: str) -> tuple:
    return tuple(int(n) for n in raw.split(",") if n.strip())


def parser() -> argparse.ArgumentParser:
    full = Settings()
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true",
                   help="small smoke run (proves the harness, numbers are noisy)")
    p.add_argument("--databases", default=",".join(targets.TARGETS),
                   help="comma-separated: %(default)s")
    p.add_argument("--scenarios",
                   help=f"comma-separated, default {','.join(scenarios.DEFAULT_FAMILIES)} "
                        f"(none with --baseline); also: "
                        f"{', '.join(f for f in scenarios.FAMILIES if f not in scenarios.DEFAULT_FAMILIES)}")
    p.add_argument("--baseline", metavar="REF",
                   help="measure this checkout's library against REF's (a git ref, "
                        "checked out in a temporary worktree removed afterwards, or a "
                        "checkout's directory), the sides alternating: the 'against the last "
                        "release' table; the peer scenarios run too only if --scenarios is "
                        "given (e.g. python -m bench --baseline 6a65c69 --quick)")
    p.add_argument("--baseline-scenarios", default=",".join(baseline.CHOICES),
                   help="with --baseline, comma-separated: %(default)s")
    p.add_argument("--peers", default=",".join(peers.PEERS), help="comma-separated: %(default)s")
    p.add_argument("--jobs", type=int, help=f"jobs per enqueue/drain scenario (full: {full.jobs})")
    p.add_argument("--rounds", type=int, help=f"rounds per case, median reported (full: "
                                              f"{full.rounds}; some scenarios run once; "
                                              f"--baseline: {full.baseline_rounds} per side)")
    p.add_argument("--workers", help="drain process counts, comma-separated (default 1,2,4)")
    p.add_argument("--concurrencies", help="concurrencies of the sleeping-jobs scenario "
                                           "(default 10,50)")
    p.add_argument("--sleep-jobs", type=int, help=f"sleeping jobs per round (full: {full.sleep_jobs})")
    p.add_argument("--pickup-jobs", type=int, help=f"jobs for pickup latency (full: {full.pickup_jobs})")
    p.add_argument("--history", type=int,
                   help=f"completed rows retained on PostgreSQL (full: {full.history_rows:,})")
    p.add_argument("--history-other", type=int, help=f"the same on SQLite and MariaDB "
                                                     f"(full: {full.history_rows_other:,})")
    p.add_argument("--claims", type=int, help=f"claims timed per table state (full: {full.claim_jobs})")
    p.add_argument("--idle-seconds", type=float,
                   help=f"idle CPU window of caravel_lite's worker (full: {full.idle_seconds:g})")
    p.add_argument("--prune-rows", type=int,
                   help=f"finished rows pruned under load (full: {full.prune_rows:,})")
    p.add_argument("--drain-budget", type=float, metavar="SECONDS",
                   help=f"longest enqueue or drain round (full: {full.drain_budget:g})")
    p.add_argument("--prune-budget", type=float, metavar="SECONDS",
                   help=f"longest prune timed under load (full: {full.prune_budget:g})")
    p.add_argument("--budget", type=float, metavar="MINUTES",
                   help="start no new case after this many minutes (those left are "
                        "reported as not run)")
    p.add_argument("--write", metavar="PATH", help="also write the report (docs/PERFORMANCE.md); "
                   "plots go beside it as PNG files")
    p.add_argument("--notes", metavar="PATH",
                   help="Markdown included verbatim in the report (what limits missed targets)")
    p.add_argument("--save-results", metavar="PATH",
                   help="also keep the run's results (a pickle) to rewrite the report later")
    p.add_argument("--from-results", metavar="PATH",
                   help="run nothing: write the report (--write) from saved results, "
                        "e.g. after editing --notes")
    p.add_argument("--busy-note", default="",
                   help="a warning printed at the top of the report (e.g. a busy machine)")
    return p


def settings_from(args: argparse.Namespace) -> Settings:
    base = QUICK if args.quick else Settings()
    changes = {name: value for name, value in (
        ("jobs", args.jobs), ("rounds", args.rounds), ("baseline_rounds", args.rounds),
        ("pickup_jobs", args.pickup_jobs),
        ("history_rows", args.history), ("history_rows_other", args.history_other),
        ("claim_jobs", args.claims), ("sleep_jobs", args.sleep_jobs),
        ("idle_seconds", args.idle_seconds), ("prune_rows", args.prune_rows),
        ("drain_budget", args.drain_budget), ("prune_budget", args.prune_budget))
        if value is not None}
    if args.workers:
        changes["workers"] = _ints(args.workers)
    if args.concurrencies:
        changes["concurrencies"] = _ints(args.concurrencies)
    return dataclasses.replace(base, **changes)


def _shown(argv: List[str]) -> List[str]:
    """The command line as the report shows it: without --save-results (a local file)."""
    shown, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--save-results":
            skip = True
        elif not arg.startswith("--save-results="):
            shown.append(arg)
    return shown


def _strip(results: runner.Results) -> runner.Results:
    """The results without the cases' callables (closures do not pickle)."""
    results.cases = [dataclasses.replace(case, run=None) for case in results.cases]
    return results


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if args.from_results:
        if not args.write:
            raise SystemExit("--from-results needs --write")
        with open(args.from_results, "rb") as saved:
            results, command, load_before = pickle.load(saved)
    else:
        settings = settings_from(args)
        chosen_targets = [targets.TARGETS[k]
                          for k in _names(args.databases, list(targets.TARGETS), "database")]
        chosen_scenarios = args.scenarios
        if chosen_scenarios is None:
            chosen_scenarios = "" if args.baseline else ",".join(scenarios.DEFAULT_FAMILIES)
        families = _names(chosen_scenarios, scenarios.FAMILIES, "scenario")
        chosen_cases = [c for c in scenarios.cases(settings) if c.family in families]
        peer_keys = _names(args.peers, list(peers.PEERS), "peer")
        load_before = machine.load_now()
        results = runner.run(settings, chosen_targets, chosen_cases, peer_keys,
                             budget=args.budget * 60 if args.budget else None)
        if args.baseline:
            results.baseline = baseline.run(
                args.baseline, settings, chosen_targets,
                _names(args.baseline_scenarios, baseline.CHOICES, "baseline scenario"),
                runner.log)
        command = "python -m bench " + " ".join(shlex.quote(a) for a in _shown(argv))
        if chosen_cases:
            print(render(results))
        if results.baseline is not None:
            print(baseline_table.render(results.baseline))
        if args.save_results:
            with open(args.save_results, "wb") as out:
                pickle.dump((_strip(results), command.strip(), load_before), out)
    if args.write:
        notes = ""
        if args.notes:
            with open(args.notes, encoding="utf-8") as source:
                notes = source.read()
        text = report.build(results, command.strip(), load_before, args.busy_note, notes,
                            os.path.dirname(os.path.abspath(args.write)))
        with open(args.write, "w", encoding="utf-8") as out:
            out.write(text)
        print(f"wrote {args.write}", file=sys.stderr)
    return 0
