"""``python -m bench.tracing_cost``: what trace propagation costs enqueue and the
default drain on one database, in three settings run alternately (the machine is
shared and noisy; medians of ``--rounds``):

- ``no span``: no span active at enqueue, no tracer provider (as without
  OpenTelemetry: nothing is stored, the worker reads nothing);
- ``active span``: each enqueue inside an SDK span (its context stored with the job);
  the worker with an SDK tracer provider (its span a child of the stored context,
  after one read of it by the job's id). Spans go to a processor that drops them, so
  the figure is the propagation's and the SDK's own cost, not an exporter's.

    python -m bench.tracing_cost [--jobs 2000] [--rounds 5] [--database sqlite]
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, List

from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from caravel_lite import (DatabaseQueue, Dispatch, JobContext, JobRegistry, QueueWorker,
                          migrate, open_database)
from caravel_lite.observability import Telemetry

from bench.dashboard import SERVERS, _create

QUEUE = "cost"


@dataclass(frozen=True)
class Job:
    n: int


def _handle(job: Job, ctx: JobContext) -> None:
    return None


class _Drop(SpanProcessor):
    """Ends every span in memory (no export)."""


def _round(db: Any, jobs: int, traced: bool) -> Dict[str, float]:
    registry = JobRegistry()
    registry.register("bench.cost.v1", Job, _handle)
    provider = TracerProvider()
    provider.add_span_processor(_Drop())
    telemetry = Telemetry(tracer_provider=provider) if traced else Telemetry()
    queue = DatabaseQueue(db, registry, telemetry=telemetry)
    tracer = provider.get_tracer("bench")
    dispatch = Dispatch(queue=QUEUE, tenant_id="t")
    start = time.perf_counter()
    for n in range(jobs):
        if traced:
            with tracer.start_as_current_span("request"):
                queue.enqueue(Job(n), dispatch)
        else:
            queue.enqueue(Job(n), dispatch)
    enqueue = time.perf_counter() - start
    worker = QueueWorker(queue, telemetry=telemetry)
    start = time.perf_counter()
    while worker.run_once(QUEUE):
        pass
    drain = time.perf_counter() - start
    db.execute_sql("DELETE FROM caravel_jobs")
    return {"enqueue": jobs / enqueue, "drain": jobs / drain}


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--database", default="sqlite", choices=["sqlite", *SERVERS])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir:
        url, drop = _create(args.database, workdir)
        try:
            db = open_database(url)
            db.connect()
            migrate(db)
            found: Dict[str, Dict[str, List[float]]] = {"no span": {}, "active span": {}}
            _round(db, 200, False)  # warm
            for _ in range(args.rounds):
                for name, traced in (("no span", False), ("active span", True)):
                    for key, value in _round(db, args.jobs, traced).items():
                        found[name].setdefault(key, []).append(value)
            db.close()
        finally:
            drop()
    print(f"{args.database}, {args.jobs} jobs, median of {args.rounds} rounds (jobs/s)")
    base = {k: statistics.median(v) for k, v in found["no span"].items()}
    for name, values in found.items():
        medians = {k: statistics.median(v) for k, v in values.items()}
        print(f"{name:12} " + "  ".join(
            f"{k} {medians[k]:8.0f} ({(medians[k] / base[k] - 1) * 100:+.1f}%)" for k in medians))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
