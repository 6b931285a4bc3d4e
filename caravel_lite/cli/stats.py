"""``caravel-lite stats``: the figures of every queue (or ``--queue``) now: ready,
delayed, leased, expired, dead letters, the oldest ready job's age; completed jobs and
failed attempts per minute since ``--since`` (default 1h) as a small chart; pickup
latency p50/p95 of the most recent finished jobs. ``--tenants`` adds the waiting,
leased and dead-lettered jobs per tenant. Read-only. ``--json``: one object."""
from __future__ import annotations

import argparse
from datetime import timedelta
from typing import List, Sequence, Tuple

from caravel_lite.admin import QueueStats
from caravel_lite.cli import common, operating

CHART_WIDTH = 60
MINUTE = timedelta(minutes=1)


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("stats", help="queue figures and a chart per minute",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    cmd.add_argument("--queue", help="only this queue")
    cmd.add_argument("--since", type=operating.instant, default=timedelta(hours=1),
                     help="start of the window: a duration before now or an ISO time (1h)")
    cmd.add_argument("--tenants", action="store_true", help="counts per tenant too")
    cmd.set_defaults(run=run)


def columns(stats: QueueStats, width: int = CHART_WIDTH) -> Tuple[int, List[List[int]]]:
    """(minutes per column, [completed, failed] per column): the window's minutes,
    zeros included, summed into at most ``width`` columns."""
    start = stats.since.replace(second=0, microsecond=0)
    minutes = max(int((stats.observed_at - start) / MINUTE) + 1, 1)
    per = -(-minutes // width)  # minutes per column, rounded up
    out = [[0, 0] for _ in range(-(-minutes // per))]
    for m in stats.per_minute:
        index = min(int((m.minute - start) / MINUTE) // per, len(out) - 1)
        out[index][0] += m.completed
        out[index][1] += m.failed
    return per, out


def _chart(label: str, values: Sequence[int]) -> str:
    return f"{label:<10}{operating.sparkline(values)}  max {max(values, default=0)}"


def run(args: argparse.Namespace) -> int:
    with operating.AdminSession(args) as admin:
        stats = admin.stats(queue=args.queue, since=args.since, by_tenant=args.tenants)
        keys = admin.limited_keys(queue=args.queue)
    if args.json:
        operating.print_json(stats)
        return common.OK
    operating.table(
        ("QUEUE", "READY", "DELAYED", "LEASED", "EXPIRED", "DEAD", "COMPLETED", "FAILED",
         "OLDEST READY"),
        [(q.queue_name, q.ready, q.delayed, q.leased, q.expired, q.dead_letter, q.completed,
          q.failed, operating.age(q.oldest_ready_age)) for q in stats.queues],
        right=range(1, 8))
    operating.limited_keys_table(keys)
    per, cols = columns(stats)
    print()
    print(f"since {operating.when(stats.since)} UTC, {per} min per column:")
    print(_chart("completed", [c[0] for c in cols]))
    print(_chart("failed", [c[1] for c in cols]))
    total_done = sum(m.completed for m in stats.per_minute)
    total_failed = sum(m.failed for m in stats.per_minute)
    dead = sum(m.dead_lettered for m in stats.per_minute)
    print(f"totals: completed {total_done}, failed attempts {total_failed}, "
          f"dead-lettered {dead}")
    if stats.pickup_sample:
        print(f"pickup latency p50 {operating.age(stats.pickup_p50)}, p95 "
              f"{operating.age(stats.pickup_p95)} (last {stats.pickup_sample} finished)")
    else:
        print("pickup latency: no finished jobs in the window")
    if stats.tenants:
        print()
        operating.table(("QUEUE", "TENANT", "READY", "DELAYED", "LEASED", "EXPIRED", "DEAD"),
                        [(t.queue_name, t.tenant_id, t.ready, t.delayed, t.leased, t.expired,
                          t.dead_letter) for t in stats.tenants], right=range(2, 7))
    return common.OK

