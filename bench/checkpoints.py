"""Where the time of a one-job-per-call enqueue loop goes on SQLite: per-call latency
percentiles and the share of the loop spent in slow calls (over 0.5 ms, which is
where SQLite's automatic WAL checkpoint runs, inside the commit that fills the log),
with the automatic checkpoint on (SQLite's default, 1,000 pages) and off.

    python -m bench.checkpoints --database sqlite-normal --jobs 5000 --rounds 3
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import List

from bench import targets
from bench.peers.caravel import CaravelPeer

SLOW = 0.0005  # seconds


def _loop(target: targets.Target, jobs: int, autocheckpoint: bool) -> List[float]:
    peer = CaravelPeer(target)
    peer.open()
    peer.install()
    if not autocheckpoint:
        peer.db.execute_sql("PRAGMA wal_autocheckpoint = 0")
    latencies = []
    for i in range(jobs):
        started = time.perf_counter()
        peer.enqueue_one(i)
        latencies.append(time.perf_counter() - started)
    peer.close()
    return latencies


def _line(label: str, latencies: List[float]) -> str:
    ordered = sorted(latencies)
    total = sum(ordered)
    slow = [x for x in ordered if x > SLOW]
    n = len(ordered)
    return (f"{label:28s} {n / total:8,.0f}/s  p50 {ordered[n // 2] * 1e3:.3f} ms  "
            f"p99 {ordered[int(n * 0.99)] * 1e3:.3f} ms  max {ordered[-1] * 1e3:.2f} ms  "
            f"calls over {SLOW * 1e3:.1f} ms: {len(slow)}, {sum(slow) / total:.0%} of the time")


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.checkpoints")
    p.add_argument("--database", default="sqlite-normal",
                   choices=[k for k, t in targets.TARGETS.items() if t.kind == "sqlite"])
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    rates = {True: [], False: []}
    workspace = targets.Workspace()
    try:
        for _ in range(args.rounds):
            for autocheckpoint in (True, False):
                with targets.fresh(targets.TARGETS[args.database], workspace) as target:
                    latencies = _loop(target, args.jobs, autocheckpoint)
                label = "autocheckpoint on" if autocheckpoint else "autocheckpoint off"
                print(_line(label, latencies))
                rates[autocheckpoint].append(len(latencies) / sum(latencies))
    finally:
        workspace.close()
    for autocheckpoint, values in rates.items():
        label = "on" if autocheckpoint else "off"
        print(f"median of {args.rounds} rounds, autocheckpoint {label}: "
              f"{statistics.median(values):,.0f}/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
