"""``caravel-lite queues``: one row per queue (``--queue``: that queue only): jobs
ready, delayed, leased (live), expired, dead letters, completed within --since
(default 1h), the age of the oldest ready job, and whether it is paused. Read-only;
sees every tenant.
``--json``: one object per queue."""
from __future__ import annotations

import argparse
from datetime import timedelta

from caravel_lite.cli import common, operating


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("queues", help="one row per queue: ready, delayed, leased ...",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    cmd.add_argument("--queue", help="only this queue")
    cmd.add_argument("--since", type=operating.instant, default=timedelta(hours=1),
                     help="window of the completed count (default 1h)")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with operating.AdminSession(args) as admin:
        stats = admin.stats(queue=args.queue, since=args.since)
        paused = admin.paused()
        keys = admin.limited_keys(queue=args.queue)
    if args.json:
        for q in stats.queues:
            operating.print_json({**operating.plain(q), "paused": q.queue_name in paused})
        for key in keys:  # after the queues: a limited key's waiting jobs
            operating.print_json(key)
        return common.OK
    operating.table(
        ("QUEUE", "READY", "DELAYED", "LEASED", "EXPIRED", "DEAD", "COMPLETED",
         "OLDEST READY", "PAUSED"),
        [(q.queue_name, q.ready, q.delayed, q.leased, q.expired, q.dead_letter, q.completed,
          operating.age(q.oldest_ready_age), "paused" if q.queue_name in paused else "")
         for q in stats.queues],
        right=range(1, 8))
    operating.limited_keys_table(keys)
    return common.OK
