"""Where the time of a one-job-per-call enqueue loop goes on SQLite: per-call latency
percentiles and the share of the loop spent in slow calls (over 0.5 ms, which is
where SQLite's automatic WAL checkpoint runs, inside the commit that fills the log),
for each automatic checkpoint size asked for (``--pages``: SQLite's default of 1,000
pages, and 0, no automatic checkpoint, unless told otherwise).

    python -m bench.checkpoints --database sqlite-normal --jobs 5000 --rounds 3
    python -m bench.checkpoints --database sqlite-full --pages 1000,10000
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Dict, List

from bench import targets
from bench.peers.caravel import CaravelPeer

SLOW = 0.0005  # seconds


def _loop(target: targets.Target, jobs: int, pages: int) -> List[float]:
    peer = CaravelPeer(target)
    peer.open()
    peer.install()
    peer.db.execute_sql(f"PRAGMA wal_autocheckpoint = {int(pages)}")
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


def _label(pages: int) -> str:
    return f"autocheckpoint {pages:,} pages" if pages else "autocheckpoint off"


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.checkpoints")
    p.add_argument("--database", default="sqlite-normal",
                   choices=[k for k, t in targets.TARGETS.items() if t.kind == "sqlite"])
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pages", default="1000,0",
                   help="automatic checkpoint sizes in pages, comma-separated (0: off)")
    args = p.parse_args()
    sizes = [int(part) for part in args.pages.split(",")]
    rates: Dict[int, List[float]] = {pages: [] for pages in sizes}
    workspace = targets.Workspace()
    try:
        for _ in range(args.rounds):
            for pages in sizes:
                with targets.fresh(targets.TARGETS[args.database], workspace) as target:
                    latencies = _loop(target, args.jobs, pages)
                print(_line(_label(pages), latencies))
                rates[pages].append(len(latencies) / sum(latencies))
    finally:
        workspace.close()
    for pages, values in rates.items():
        print(f"median of {args.rounds} rounds, {_label(pages)}: "
              f"{statistics.median(values):,.0f}/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
