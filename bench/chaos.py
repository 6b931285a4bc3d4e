"""python -m bench.chaos: fault-injection runs of the whole worker for a while (#22).

Runs the harness of ``tests/chaos`` (the same one CI runs briefly) again and again,
the databases taking turns, each run on a fresh database with the next seed, until
``--minutes`` are spent; then prints a Markdown table for docs/RELIABILITY.md: runs,
jobs, handler runs, worker stops by kind, proxy faults injected by kind, and the
invariant violations with the seeds that showed them.

    python -m bench.chaos --minutes 10 --databases sqlite,postgres,mysql

A seed replays a run's schedules: ``--seed N --runs 1 --databases NAME`` (with the
same ``--seconds`` and mixes) asks for what run N asked for; the timing of real
processes still makes each run its own.
"""
from __future__ import annotations

import argparse
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, List, Optional

from bench import targets
from caravel_lite import migrate, open_database
from tests.chaos import harness, invariants, plan

DATABASES = {"sqlite": "sqlite-normal", "postgres": "postgres", "mysql": "mysql"}
LABELS = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}


@dataclass
class Tally:
    """What the runs on one database added up to."""

    runs: int = 0
    jobs: int = 0
    handler_runs: int = 0
    workers: int = 0
    seconds: float = 0.0
    stops: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    drops: Counter = field(default_factory=Counter)
    violations: Counter = field(default_factory=Counter)
    seeds: Dict[str, List[int]] = field(default_factory=dict)

    def add(self, result: harness.RunResult) -> None:
        self.runs += 1
        self.jobs += result.jobs
        self.handler_runs += result.runs
        self.workers += result.workers_started
        self.seconds += result.seconds
        self.stops.update(result.stops)
        self.faults.update(result.faults)
        self.drops.update(result.drops)
        for name, items in result.violations.items():
            self.violations[name] += len(items)
            self.seeds.setdefault(name, []).append(result.seed)


def _names(raw: str) -> List[str]:
    chosen = [item.strip() for item in raw.split(",") if item.strip()]
    unknown = [item for item in chosen if item not in DATABASES]
    if unknown:
        raise SystemExit(f"unknown databases: {', '.join(unknown)} (choose from "
                         f"{', '.join(DATABASES)})")
    return chosen


def _counts(counter: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"


def table(tallies: Dict[str, Tally]) -> str:
    lines = ["| database | runs | jobs | handler runs | worker processes | stops | "
             "faults injected | invariant violations |",
             "|---|---|---|---|---|---|---|---|"]
    for name, t in tallies.items():
        broken = _counts(t.violations) if t.violations else "0"
        lines.append(f"| {LABELS[name]} | {t.runs} | {t.jobs} | {t.handler_runs} | "
                     f"{t.workers} | {_counts(t.stops)} | "
                     f"{_counts(t.faults) if name != 'sqlite' else 'none (no proxy)'} | "
                     f"{broken} |")
    seeds = [f"- {LABELS[name]}, {violation}: seeds "
             f"{', '.join(str(s) for s in sorted(set(t.seeds[violation]))[:8])}"
             for name, t in tallies.items() for violation in sorted(t.seeds)]
    if seeds:
        lines += ["", "Violations by invariant (see tests/chaos/invariants.py), with the "
                      "first seeds that showed them:"] + seeds
    return "\n".join(lines)


def one_run(name: str, seed: int, settings: harness.Settings, workspace: targets.Workspace,
            keep: Optional[Path]) -> Optional[harness.RunResult]:
    target = targets.TARGETS[DATABASES[name]]
    with targets.fresh(target, workspace) as fresh:
        db = open_database(fresh.url)
        with db.connection_context():
            migrate(db)
        directory = Path(tempfile.mkdtemp(prefix=f"chaos-{name}-{seed}-",
                                          dir=keep or workspace.directory))
        try:
            return harness.run(name, fresh.url, seed, settings, directory)
        finally:
            if keep is None:
                shutil.rmtree(directory, ignore_errors=True)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=10.0,
                   help="start no new run after this long (default %(default)s)")
    p.add_argument("--databases", default="sqlite,postgres,mysql",
                   help="comma-separated: %(default)s")
    p.add_argument("--seconds", type=float, default=30.0,
                   help="faults and stops per run before its drain (default %(default)s)")
    p.add_argument("--seed", type=int, help="first seed (default: random); then +1 per run")
    p.add_argument("--runs", type=int, help="stop after this many runs in all")
    p.add_argument("--behaviours", default=plan.BEHAVIOURS,
                   help="handler behaviours by weight (default %(default)s)")
    p.add_argument("--faults", default=plan.FAULTS,
                   help="proxy faults by weight (default %(default)s)")
    p.add_argument("--modes", default=plan.MODES,
                   help="how workers take signals, by weight (default %(default)s)")
    p.add_argument("--keep", metavar="DIR",
                   help="keep each run's worker logs and records under DIR")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    names = _names(args.databases)
    for name in names:
        reason = targets.server_reachable(targets.TARGETS[DATABASES[name]])
        if reason is not None:
            raise SystemExit(f"{name} is unreachable: {reason}")
    try:
        plan.weights(args.behaviours, [b.value for b in plan.Behaviour])
        plan.weights(args.faults, plan.FAULT_KINDS)
        plan.weights(args.modes, [m.value for m in plan.Mode])
    except ValueError as exc:
        raise SystemExit(str(exc))
    settings = replace(harness.Settings(), seconds=args.seconds, behaviours=args.behaviours,
                       faults=args.faults, modes=args.modes)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    keep = Path(args.keep) if args.keep else None
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    tallies = {name: Tally() for name in names}
    # A SIGTERM ends the run through the finally clauses: worker processes reaped,
    # fresh databases dropped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    deadline = time.monotonic() + args.minutes * 60
    workspace = targets.Workspace()
    try:
        done = 0
        while time.monotonic() < deadline and (args.runs is None or done < args.runs):
            for name in names:
                if time.monotonic() >= deadline or (args.runs is not None
                                                    and done >= args.runs):
                    break
                done += 1
                result = one_run(name, seed, settings, workspace, keep)
                seed += 1
                if result is None:
                    continue
                tallies[name].add(result)
                print(harness.describe(result), flush=True)
    finally:
        workspace.close()
    command = " ".join(["python -m bench.chaos", *(sys.argv[1:] if argv is None else argv)])
    print(f"\n{command}\n")
    print(table(tallies))
    print("\nInvariants:\n" + "\n".join(f"- {k}: {v}" for k, v in invariants.DESCRIPTIONS.items()))
    return 0 if all(not t.violations for t in tallies.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
