"""``python -m bench.metrics``: the server time of one /metrics scrape with a large jobs
table (issue 28's target: within 100 ms on every database with 1,000,000 jobs).

For each database: a fresh database, migrated, filled with ``--jobs`` rows (default
1,000,000: a week of history over five queues, bench.operator_data), its planner
statistics refreshed (as bench.dashboard does), then ``--repeat`` scrapes straight
through the WSGI endpoint of ``caravel-lite metrics`` (no network), each on a new
connection opened and closed by the scrape (the endpoint holds none between scrapes):
the time is the WSGI call, body included. Also measured: the collector's reads alone
on a held connection, and the same scrape with ``tenant_label=True``.

    python -m bench.metrics [--jobs 1000000] [--databases sqlite,postgres,mysql]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from typing import List, Tuple

from caravel_lite import QueueAdmin, migrate, open_database
from caravel_lite.clock import floor_ms, now_micros, system_clock
from caravel_lite.metrics import MetricsEndpoint, QueueMetrics

from bench import operator_data
from bench.dashboard import ANALYZE, _create, _environ, _time_ms, summary

TARGET_MS = 100.0
STEADY = "scrape (GET /metrics, own connection)"


def _scrape(app) -> None:
    status: List[str] = []
    body = b"".join(app(_environ("/metrics"), lambda s, h, e=None: status.append(s)))
    if not status or not status[0].startswith("200") or b"caravel_jobs{" not in body:
        raise RuntimeError(f"GET /metrics answered {status}")


def measure(backend: str, jobs: int, repeat: int) -> List[Tuple[str, List[float]]]:
    with tempfile.TemporaryDirectory() as workdir:
        url, drop = _create(backend, workdir)
        try:
            db = open_database(url)
            db.connect()
            migrate(db)
            started = time.perf_counter()
            written, failures = operator_data.load(db, jobs, floor_ms(now_micros(system_clock)))
            for statement in ANALYZE[backend]:
                db.execute_sql(statement)
            print(f"[{backend}] loaded {written:,} jobs and {failures:,} failure records in "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
            admin = QueueAdmin(db)
            plain = QueueMetrics(admin)
            by_tenant = QueueMetrics(admin, tenant_label=True)
            results = [("  reads alone, connection held", _time_ms(plain.render, repeat))]
            db.close()
            results[:0] = [(STEADY, _time_ms(lambda: _scrape(
                MetricsEndpoint(plain, insecure_no_auth=True)), repeat))]
            results.append(("scrape with tenant_label=True", _time_ms(lambda: _scrape(
                MetricsEndpoint(by_tenant, insecure_no_auth=True)), repeat)))
            assert db.is_closed(), "a scrape left its connection open"
            return results
        finally:
            drop()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.metrics", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--databases", default="sqlite,postgres,mysql")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    print(f"/metrics server time, {args.jobs:,} jobs, {args.repeat} scrapes each "
          f"(ms: median / p95 / max)")
    missed = False
    for backend in [name.strip() for name in args.databases.split(",") if name.strip()]:
        for name, times in measure(backend, args.jobs, args.repeat):
            median, p95, most = summary(times)
            print(f"{backend:8} {name:40} {median:8.1f} {p95:8.1f} {most:8.1f}", flush=True)
            missed = missed or (name == STEADY and p95 > TARGET_MS)
    print(f"target: {STEADY} p95 within {TARGET_MS:.0f} ms on every database: "
          f"{'MISSED' if missed else 'met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
