"""One worker process of a fault-injection run: ``python -m tests.chaos.worker ...``.

A :class:`QueueWorker` (concurrency > 1, short leases with renewals, ``max_outage``)
over the chaos registry, until the harness stops it. ``--mode`` says how it takes
signals: ``handle_signals`` (caravel_lite's: SIGTERM/SIGINT stop it cleanly, a second
SIGINT raises KeyboardInterrupt) or ``exit_on_sigterm`` (the common application
pattern ``signal(SIGTERM, lambda *a: sys.exit(0))``, and Python's own SIGINT, which
raises KeyboardInterrupt).

It appends to ``--log`` (one write per line, so lines never interleave): ``ready``
once signals are handled; ``claim JOB ATTEMPT US EXPIRES_US`` for every lease a claim
returned to the worker; ``start JOB ATTEMPT US`` when the worker enters a handler's scope; ``end
JOB ATTEMPT OUTCOME US`` right before a handler returns or raises; ``tick US`` every
TICK seconds from a thread of its own. The audit reads them to tell a lease some worker
held from one nobody held, when a handler really returned, and when the process itself
was not running at all (a gap between ticks: the machine gave it no CPU).

Exit codes: 0 after a clean stop (or ``sys.exit(0)``), 130 on KeyboardInterrupt, 1
when ``run`` raised.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from types import TracebackType
from typing import Any, List, Optional, Sequence, Type

from caravel_lite import ClaimBatch, DatabaseQueue, JobContext, QueueLease, QueueOptions
from caravel_lite import QueueWorker, open_database
from caravel_lite.worker import handle_signals
from tests.chaos import jobs
from tests.chaos import plan
from tests.chaos.plan import Mode


class Log:
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(self, *words: object) -> None:
        os.write(self._fd, (" ".join(str(w) for w in words) + "\n").encode())


# How often the ticker writes; a gap of several ticks is a process the machine froze.
TICK = 0.1


def _tick(log: Log) -> None:
    while True:
        log.line("tick", jobs.now_us())
        time.sleep(TICK)


def _start_ticker(log: Log) -> None:
    threading.Thread(target=_tick, args=(log,), daemon=True, name="chaos-ticker").start()


class LoggedQueue(DatabaseQueue):
    """Writes every lease a claim hands to the worker before the worker sees it."""

    log: Log

    def _logged(self, leases: Sequence[QueueLease]) -> None:
        for lease in leases:
            self.log.line("claim", lease.job_id, lease.attempt, jobs.now_us(),
                          int(lease.expires_at.timestamp() * 1_000_000))

    def claim_batch(self, queue_name: str, limit: int, **options: Any) -> ClaimBatch:
        batch = super().claim_batch(queue_name, limit, **options)
        self._logged(batch.leases)
        return batch

    def claim_many(self, queue: str, limit: int) -> List[QueueLease]:
        leases = super().claim_many(queue, limit)
        self._logged(leases)
        return leases

    def claim(self, queue: str) -> Optional[QueueLease]:
        lease = super().claim(queue)
        if lease is not None:
            self._logged([lease])
        return lease


class StartScope:
    """The worker's scope around each handler: says which lease's handler began."""

    log: Log

    def __init__(self, ctx: JobContext) -> None:
        self.ctx = ctx

    def __enter__(self) -> None:
        self.log.line("start", self.ctx.job_id, self.ctx.attempt, jobs.now_us())

    def __exit__(self, kind: Optional[Type[BaseException]], value: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        return None


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="tests.chaos.worker")
    parser.add_argument("--url", required=True, help="the queue's database (via the proxy)")
    parser.add_argument("--results-url", required=True, help="direct, for chaos_runs")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--mode", choices=[m.value for m in Mode], required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease", type=float, default=2.0)
    parser.add_argument("--renewal", type=float, default=0.5)
    parser.add_argument("--lifetime", type=float, default=5.0)
    parser.add_argument("--max-attempts", type=int, default=10)
    parser.add_argument("--shutdown-timeout", type=float, default=3.0)
    parser.add_argument("--max-outage", type=float, default=60.0)
    parser.add_argument("--behaviours", default=plan.BEHAVIOURS)
    args = parser.parse_args(argv)

    log = Log(args.log)
    LoggedQueue.log = StartScope.log = log
    jobs.configure(args.results_url, args.seed, args.lease, note=log.line,
                   behaviours=args.behaviours)
    options = QueueOptions(lease_duration=timedelta(seconds=args.lease),
                           lease_renewal_interval=timedelta(seconds=args.renewal),
                           max_lease_lifetime=timedelta(seconds=args.lifetime),
                           max_attempts=args.max_attempts,
                           retry_delay=timedelta(milliseconds=50),
                           max_retry_delay=timedelta(milliseconds=500),
                           concurrency_limit=jobs.KEY_LIMIT)
    queue = LoggedQueue(open_database(args.url), jobs.registry, options)
    worker = QueueWorker(queue, concurrency=args.concurrency, scope=StartScope,
                         shutdown_timeout=args.shutdown_timeout, poll_interval=0.2)
    stop = threading.Event()
    try:
        if args.mode == Mode.HANDLE_SIGNALS.value:
            with handle_signals(stop):
                log.line("ready")  # the log's first line (the harness waits for it)
                _start_ticker(log)
                worker.run(jobs.QUEUE, stop=stop, max_outage=args.max_outage)
        else:
            def leave(signum: int, frame: Any) -> None:
                sys.exit(0)
            signal.signal(signal.SIGTERM, leave)
            # Python's own SIGINT (KeyboardInterrupt), even where the process was
            # started with SIGINT ignored (a background job of a shell, nohup).
            signal.signal(signal.SIGINT, signal.default_int_handler)
            log.line("ready")
            _start_ticker(log)
            worker.run(jobs.QUEUE, stop=stop, max_outage=args.max_outage)
    except KeyboardInterrupt:
        return 130
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
