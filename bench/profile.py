"""Profile one caravel_lite hot path with pyinstrument, in this process.

    python -m bench.profile --database sqlite-normal --path enqueue --jobs 5000

Paths: enqueue (one job per call), claim (claim + complete, one job at a time) and
drain (QueueWorker.run_once with prefetch=50 over a pre-filled queue).
"""
from __future__ import annotations

import argparse

from bench import targets
from bench.peers.caravel import CaravelPeer
from bench.peers.caravel_worker import CaravelPrefetchPeer

PATHS = ("enqueue", "claim", "drain")


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile")
    p.add_argument("--database", default="sqlite-normal", choices=list(targets.TARGETS))
    p.add_argument("--path", default="enqueue", choices=PATHS)
    p.add_argument("--jobs", type=int, default=5000)
    args = p.parse_args()
    from pyinstrument import Profiler

    workspace = targets.Workspace()
    try:
        with targets.fresh(targets.TARGETS[args.database], workspace) as target:
            peer = CaravelPrefetchPeer(target) if args.path == "drain" else CaravelPeer(target)
            peer.open()
            peer.install()
            if args.path in ("claim", "drain"):
                peer.prefill(args.jobs)
            profiler = Profiler(interval=0.0005)
            with profiler:
                if args.path == "drain":
                    peer.drain()
                elif args.path == "claim":
                    for _ in range(args.jobs):
                        peer.claim_one()
                else:
                    for i in range(args.jobs):
                        peer.enqueue_one(i)
            peer.close()
            print(profiler.output_text(show_all=False))
    finally:
        workspace.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
