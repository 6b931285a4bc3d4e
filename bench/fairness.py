"""Tenant B's one job behind tenant A's flood: how long until it starts, fair and unfair.

``python -m bench.fairness [--flood 100000] [--databases sqlite-normal,postgres,mysql]``

For each database and each kind of queue (``QueueOptions()`` and
``QueueOptions(fair_tenants=True)``): tenant A enqueues ``--flood`` ready jobs, a worker
with default settings (``QueueWorker(queue)``, one thread) starts on them, and once
``--warmup`` of them ran, tenant B enqueues one job. Printed: the seconds from B's
enqueue to B's handler starting, and how many of A's jobs started in between. An
unfair run that would wait out the whole flood is stopped after ``--budget`` seconds
and its figure estimated from the rate so far (marked ``>=``).
"""
from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass
from typing import Any, List, Optional

from bench.targets import TARGETS, Workspace, fresh, server_reachable

QUEUE = "flood"


@dataclass(frozen=True)
class Job:
    tenant: str


def measure(url: str, fair: bool, flood: int, warmup: int, budget: float,
            pragmas: Optional[dict] = None) -> str:
    import caravel_lite as cl

    db = cl.open_database(url, **({"pragmas": pragmas} if pragmas else {}))
    db.connect()
    cl.migrate(db)
    started_a = [0]
    b_started: List[float] = []
    a_before_b: List[int] = []
    ready = threading.Event()

    def handler(job: Job, ctx: Any) -> None:
        if job.tenant == "tenant-b":
            b_started.append(time.perf_counter())
            a_before_b.append(started_a[0])
        else:
            started_a[0] += 1
            if started_a[0] >= warmup:
                ready.set()

    registry = cl.JobRegistry()
    registry.register("bench.flood.v1", Job, handler)
    queue = cl.DatabaseQueue(db, registry, cl.QueueOptions(fair_tenants=fair))
    for start in range(0, flood, 1000):
        queue.enqueue_many([(Job("tenant-a"), cl.Dispatch(queue=QUEUE, tenant_id="tenant-a"))
                            for _ in range(min(1000, flood - start))])
    stop = threading.Event()
    worker = threading.Thread(target=cl.QueueWorker(queue).run, args=(QUEUE, stop))
    worker.start()
    try:
        ready.wait(120)
        a_at_enqueue = started_a[0]
        enqueued = time.perf_counter()
        queue.enqueue(Job("tenant-b"), cl.Dispatch(queue=QUEUE, tenant_id="tenant-b"))
        while not b_started and time.perf_counter() - enqueued < budget:
            time.sleep(0.01)
        elapsed = time.perf_counter() - enqueued
        ran = started_a[0] - a_at_enqueue
    finally:
        stop.set()
        worker.join()
        db.close()
    if b_started:
        return (f"{b_started[0] - enqueued:8.3f} s  ({a_before_b[0] - a_at_enqueue} of A's "
                f"jobs started first)")
    remaining = flood - a_at_enqueue
    rate = ran / elapsed if elapsed else 0.0
    estimate = remaining / rate if rate else float("inf")
    return (f"  >={estimate:6.0f} s  (not started after {elapsed:.0f} s; {remaining:,} of "
            f"A's jobs ahead at {rate:,.0f} jobs/s)")


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__)
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--budget", type=float, default=20.0)
    parser.add_argument("--databases", default="sqlite-normal,postgres,mysql")
    args = parser.parse_args(argv)
    workspace = Workspace()
    try:
        for key in args.databases.split(","):
            target = TARGETS[key]
            reason = server_reachable(target)
            if reason:
                print(f"{target.label}: skipped ({reason})")
                continue
            for fair in (False, True):
                with fresh(target, workspace) as t:
                    pragmas = t.sqlite_pragmas if t.kind == "sqlite" else None
                    figure = measure(t.url, fair, args.flood, args.warmup, args.budget,
                                     pragmas)
                label = "fair_tenants=True " if fair else "fair_tenants=False"
                print(f"{target.label:32} {label} {args.flood:,} of A's: B started after "
                      f"{figure}", flush=True)
    finally:
        workspace.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
