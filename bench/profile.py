"""Profile one caravel_lite hot path with pyinstrument, in this process.

    python -m bench.profile --database sqlite-normal --path enqueue --jobs 5000

Paths: enqueue (one job per call), enqueue-key (the same, each call with an
idempotency key of its own), claim (claim + complete, one job at a time), drain
(QueueWorker.run_once with prefetch=50 over a pre-filled queue) and run-once (a
script's loop of ``QueueWorker(queue).run_once(queue)`` with no setting given),
profiled with pyinstrument; default (``QueueWorker(queue).run(...)`` with no setting given over a
pre-filled queue until every job ran, what the "drain, default worker" scenario
measures) and sleep (the same at ``--concurrency`` over jobs sleeping 50 ms), profiled
with :mod:`bench.sampler` on every thread, since the worker has threads of its own;
idle (a default worker on an empty queue for ``--seconds``): CPU time and voluntary
context switches of each of its threads, from /proc (a sampler cannot see wake-ups
this short), and how many table reads its waiter made; wal (SQLite only): how many
pages each enqueue writes to the write-ahead log, caravel_lite beside huey's
SqliteHuey, which is what a commit costs at synchronous=FULL.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import time
from typing import Iterator, Type

from bench import targets
from bench.peers.caravel import CaravelPeer
from bench.peers.caravel_worker import CaravelPrefetchPeer

PATHS = ("enqueue", "enqueue-key", "claim", "drain", "run-once", "default", "sleep",
         "idle", "wal")


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.profile")
    p.add_argument("--database", default="sqlite-normal", choices=list(targets.TARGETS))
    p.add_argument("--path", default="enqueue", choices=PATHS)
    p.add_argument("--jobs", type=int, default=5000)
    p.add_argument("--concurrency", type=int, default=10, help="for --path sleep")
    p.add_argument("--seconds", type=float, default=20.0, help="for --path idle")
    args = p.parse_args()
    if args.path in ("default", "sleep"):
        return _worker(args)
    if args.path == "idle":
        return _idle(args)
    if args.path == "wal":
        return _wal(args)
    from pyinstrument import Profiler

    kind = CaravelPrefetchPeer if args.path == "drain" else CaravelPeer
    with _installed(args, kind) as peer:
        if args.path in ("claim", "drain", "run-once"):
            peer.prefill(args.jobs)
        profiler = Profiler(interval=0.0005)
        with profiler:
            if args.path == "drain":
                peer.drain()
            elif args.path == "run-once":
                peer.drain_run_once()
            elif args.path == "claim":
                for _ in range(args.jobs):
                    peer.claim_one()
            elif args.path == "enqueue-key":
                for i in range(args.jobs):
                    peer.enqueue_one_keyed(i)
            else:
                for i in range(args.jobs):
                    peer.enqueue_one(i)
    print(profiler.output_text(show_all=False))
    return 0


@contextlib.contextmanager
def _installed(args: argparse.Namespace,
               kind: Type[CaravelPeer] = CaravelPeer) -> Iterator[CaravelPeer]:
    """A ``kind`` peer open on a fresh, migrated ``--database``; closed after the block,
    then the database and the SQLite workspace are removed."""
    workspace = targets.Workspace()
    try:
        with targets.fresh(targets.TARGETS[args.database], workspace) as target:
            peer = kind(target)
            peer.open()
            peer.install()
            yield peer
            peer.close()
    finally:
        workspace.close()


def _worker(args: argparse.Namespace) -> int:
    from bench.sampler import Sampler

    with _installed(args) as peer:
        started = time.monotonic()
        with Sampler() as sampler:
            if args.path == "default":
                peer.prefill(args.jobs)
                started = time.monotonic()
                done = peer.drain_default(args.jobs)
            else:
                peer.prefill_sleep(args.jobs, 0.05)
                started = time.monotonic()
                done = peer.drain_sleep(args.jobs, args.concurrency)
        elapsed = time.monotonic() - started
    print(f"{done} jobs in {elapsed:.2f} s: {done / elapsed:,.0f}/s (profiler on)")
    print(sampler.report())
    return 0


def _threads() -> dict:
    """tid -> (CPU seconds, voluntary context switches) of this process's threads: CPU
    from schedstat (nanoseconds) where the kernel has it, else utime + stime (ticks of
    10 ms, too coarse for a thread that wakes once a second)."""
    found = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/status") as status:
                switches = int(status.read().split("voluntary_ctxt_switches:")[1].split()[0])
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as schedstat:
                    cpu = int(schedstat.read().split()[0]) / 1e9
            except (OSError, IndexError, ValueError):
                with open(f"/proc/self/task/{tid}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError):
            continue
        found[int(tid)] = (cpu, switches)
    return found


def _idle(args: argparse.Namespace) -> int:
    import threading

    from bench.peers.base import QUEUE
    from caravel_lite.worker import QueueWorker
    from caravel_lite.worker import waiter as waiting

    made = []
    real_waiter_for = waiting.waiter_for

    def waiter_for(queue, names):  # keeps the worker's waiter, to read its count
        made.append(real_waiter_for(queue, names))
        return made[-1]

    waiting.waiter_for = waiter_for
    with _installed(args) as peer:
        stop = threading.Event()
        loop = threading.Thread(target=QueueWorker(peer.queue).run, args=(QUEUE,),
                                kwargs={"stop": stop}, name="worker-loop")
        loop.start()
        time.sleep(2.0)  # settled in its idle wait
        reads = made[0].reads if made else 0
        before = _threads()
        time.sleep(args.seconds)
        after = _threads()
        reads = (made[0].reads if made else 0) - reads
        names = {t.native_id: t.name for t in threading.enumerate()}
        print(f"idle default worker, {args.database}, {args.seconds:g} s:")
        total = 0.0
        for tid, (seconds, switches) in sorted(after.items()):
            if tid in before:
                cpu = seconds - before[tid][0]
                total += cpu
                print(f"  {names.get(tid, str(tid)):24s} CPU {cpu * 1000:6.1f} ms "
                      f"({100 * cpu / args.seconds:.3f}% of a core), "
                      f"{switches - before[tid][1]} voluntary switches")
        print(f"  all threads              CPU {total * 1000:6.1f} ms "
              f"({100 * total / args.seconds:.3f}% of a core); the waiter's table "
              f"reads: {reads} ({reads / args.seconds:.1f}/s)")
        stop.set()
        loop.join()
    return 0


def _wal(args: argparse.Namespace) -> int:
    from bench.peers.huey_sqlite import SqliteHueyPeer

    if targets.TARGETS[args.database].kind != "sqlite":
        raise SystemExit("--path wal: an SQLite database (sqlite-normal, sqlite-full)")
    connections = {CaravelPeer: lambda peer: peer.db.connection(),
                   SqliteHueyPeer: lambda peer: peer.huey.storage.conn}
    print(f"WAL pages written per enqueue, one job per call, {args.jobs} jobs, "
          f"{args.database}:")
    for kind, connection in connections.items():
        with _installed(args, kind) as peer:
            peer.enqueue_one(0)  # the first write opens the connection, made here
            conn = connection(peer)
            # No checkpoint during the count, so the log holds every page written.
            conn.execute("PRAGMA wal_autocheckpoint = 0")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            started = time.perf_counter()
            for i in range(args.jobs):
                peer.enqueue_one(i)
            elapsed = time.perf_counter() - started
            _, frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            print(f"  {peer.name:20s} {frames / args.jobs:.2f} pages per enqueue "
                  f"({args.jobs / elapsed:,.0f} enqueues/s without checkpoints)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
