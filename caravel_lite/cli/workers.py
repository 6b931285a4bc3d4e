"""``caravel-lite workers``: one row per running worker (its heartbeat row): id, host,
pid, queues, concurrency, jobs running, version, started, last seen, and LOST when no
heartbeat came for 3 beats (15 s: killed, or cut off from the database). ``--jobs``
lists under each worker the leased jobs it holds and since when. ``--json``: one
object per worker, with its jobs. Read-only."""
from __future__ import annotations

import argparse

from caravel_lite.cli import common, operating


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("workers", help="running workers and the jobs they run",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    cmd.add_argument("--jobs", action="store_true", help="list each worker's jobs")
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with operating.AdminSession(args) as admin:
        workers = admin.workers()
    if args.json:
        for worker in workers:
            operating.print_json(worker)
        return common.OK
    operating.table(
        ("WORKER", "HOST", "PID", "QUEUES", "CONC", "RUNNING", "VERSION", "STARTED",
         "LAST SEEN", "STATUS"),
        [(w.worker_id, w.host, w.pid, ",".join(w.queues), w.concurrency, w.running,
          w.version, w.started_at.isoformat(timespec="seconds"),
          w.last_seen_at.isoformat(timespec="seconds"), "LOST" if w.lost else "alive")
         for w in workers], right=(2, 4, 5))
    if args.jobs:
        for w in workers:
            for job in w.jobs:
                since = job.claimed_at.isoformat(timespec="seconds") if job.claimed_at else "-"
                print(common.safe_text(f"  {w.worker_id}  {job.job_id}  {job.queue_name}  "
                                       f"{job.wire_name}  since {since}"))
    return common.OK
