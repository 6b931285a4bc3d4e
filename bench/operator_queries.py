"""How long QueueAdmin's listing and stats take on a large table:
``python -m bench.operator_queries [--jobs 1000000] [--databases sqlite,postgres,mysql]``.

For each database: a fresh database (created and dropped by bench.targets), migrated,
filled with ``--jobs`` jobs by bench.operator_data (a week of history over five queues
and twenty tenants, 1% of the newest half-unfinished, 3% dead letters, a failure history
of about 11% of the jobs), the planner's statistics refreshed (as autovacuum, or an
operator after a bulk load, would), then each call below timed ``--rounds`` times,
warm; the median and the worst are printed in milliseconds. Calls go through the
public API, Python and driver included.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from bench import operator_data, targets
from caravel_lite import QueueAdmin, migrate
from caravel_lite.dialect import open_database

KINDS = {"sqlite": "sqlite-normal", "postgres": "postgres", "mysql": "mysql"}
ANALYZE = {"sqlite": ("ANALYZE",),
           "postgres": ("VACUUM ANALYZE caravel_jobs", "VACUUM ANALYZE caravel_failures"),
           "mysql": ("ANALYZE TABLE caravel_jobs", "ANALYZE TABLE caravel_failures")}

Call = Callable[[QueueAdmin], object]


def calls(admin: QueueAdmin) -> List[Tuple[str, Call]]:
    cursor = admin.jobs().next_cursor
    dead = admin.jobs(state="dead_letter").jobs[0].job_id
    return [
        ("jobs() newest 50", lambda a: a.jobs()),
        ("jobs(after=cursor) page 2", lambda a: a.jobs(after=cursor)),
        ("jobs(queue=rare)", lambda a: a.jobs(queue="rare")),
        ("jobs(queue=emails, completed)", lambda a: a.jobs(queue="emails", state="completed")),
        ("jobs(state=dead_letter)", lambda a: a.jobs(state="dead_letter")),
        ("jobs(tenant_id=tenant-19)", lambda a: a.jobs(tenant_id="tenant-19")),
        # Pending jobs: through the claim index and sorted, where the listings leave
        # them out (migration 0007).
        ("jobs(queue=emails, pending)", lambda a: a.jobs(queue="emails", state="pending")),
        ("jobs(tenant_id=tenant-03, pending)",
         lambda a: a.jobs(tenant_id="tenant-03", state="pending")),
        ("jobs(queue=billing, failure=...)",
         lambda a: a.jobs(queue="billing", failure="handler_failed")),
        ("jobs(since=1h)", lambda a: a.jobs(since=timedelta(hours=1))),
        ("job(id) with history", lambda a: a.job(dead)),
        ("stats() last hour", lambda a: a.stats()),
        ("stats(queue=emails)", lambda a: a.stats(queue="emails")),
        ("stats() last day", lambda a: a.stats(since=timedelta(days=1))),
        ("stats(by_tenant=True)", lambda a: a.stats(by_tenant=True)),
    ]


def measure(admin: QueueAdmin, rounds: int) -> Dict[str, Tuple[float, float]]:
    out: Dict[str, Tuple[float, float]] = {}
    for name, call in calls(admin):
        call(admin)  # warm: caches, prepared plans
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            call(admin)
            times.append((time.perf_counter() - start) * 1000)
        out[name] = (statistics.median(times), max(times))
    return out


def run_one(kind: str, jobs: int, rounds: int) -> Optional[Dict[str, Tuple[float, float]]]:
    target = targets.TARGETS[KINDS[kind]]
    reason = targets.server_reachable(target)
    if reason is not None:
        print(f"{kind}: skipped ({reason})", file=sys.stderr)
        return None
    workspace = targets.Workspace()
    try:
        with targets.fresh(target, workspace) as ready:
            db = open_database(ready.url)
            db.connect()
            try:
                migrate(db)
                started = time.perf_counter()
                written = operator_data.load(db, jobs, int(time.time() * 1000))
                for statement in ANALYZE[kind]:
                    db.execute_sql(statement)
                print(f"{kind}: {written[0]:,} jobs and {written[1]:,} failure records "
                      f"loaded in {time.perf_counter() - started:.0f} s", file=sys.stderr)
                return measure(QueueAdmin(db), rounds)
            finally:
                db.close()
    finally:
        workspace.close()


def render(results: Dict[str, Dict[str, Tuple[float, float]]]) -> str:
    kinds = list(results)
    names = list(next(iter(results.values())))
    width = max(len(n) for n in names)
    lines = [f"{'call':<{width}}  " + "  ".join(f"{k + ' median/max ms':>24}" for k in kinds)]
    for name in names:
        cells = [f"{results[k][name][0]:>11.1f} / {results[k][name][1]:>8.1f}" for k in kinds]
        lines.append(f"{name:<{width}}  " + "  ".join(f"{c:>24}" for c in cells))
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.operator_queries",
                                     description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--databases", default="sqlite,postgres,mysql")
    args = parser.parse_args(argv)
    results = {}
    for kind in [k.strip() for k in args.databases.split(",") if k.strip()]:
        if kind not in KINDS:
            parser.error(f"unknown database {kind!r} (choose from {', '.join(KINDS)})")
        measured = run_one(kind, args.jobs, args.rounds)
        if measured is not None:
            results[kind] = measured
    if results:
        print(f"{args.jobs:,} jobs; median and worst of {args.rounds} warm runs")
        print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
