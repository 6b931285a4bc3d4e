"""Processes started by the fault tests (``python -m tests.faults.child MODE ...``).

``worker``: a QueueWorker loop over the fault registry until SIGTERM (exit 0), or until
an infrastructure error (exit 1; with ``--max-outage S`` only after S seconds of outage); ``enqueue``: enqueues ``Work`` jobs until SIGTERM or a
count is reached. Both write a JSON summary (transient errors retried, errors seen,
jobs accepted) to ``--out`` when they end normally, so the test can audit them.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, List

import peewee

from caravel_lite import DatabaseQueue, Dispatch, QueueOptions, QueueWorker
from caravel_lite.dialect import open_database, transient_retries
from caravel_lite.retry import policy_of
from caravel_lite.worker import handle_signals
from tests.faults import jobs


class PhaseQueue(DatabaseQueue):
    """Writes where this process is before and after each lease operation (the
    worker's loop claims with claim_batch and acknowledges with complete_many;
    run_once uses claim and complete)."""

    def claim(self, queue: str) -> Any:
        jobs.phase("claiming")
        lease = super().claim(queue)
        if lease is not None:
            jobs.phase("claimed")
        return lease

    def claim_batch(self, queue_name: str, limit: int, **options: Any) -> Any:
        jobs.phase("claiming")
        batch = super().claim_batch(queue_name, limit, **options)
        if batch.leases:
            jobs.phase("claimed")
        return batch

    def complete(self, lease: Any) -> bool:
        jobs.phase("acking")
        if self.ack_delay:
            time.sleep(self.ack_delay)  # widen the window a kill can land in
        done = super().complete(lease)
        jobs.phase("acked")
        return done

    def complete_many(self, leases: Any) -> Any:
        jobs.phase("acking")
        if self.ack_delay:
            time.sleep(self.ack_delay)
        done = super().complete_many(leases)
        jobs.phase("acked")
        return done

    ack_delay = 0.0


def _open(args: argparse.Namespace) -> peewee.Database:
    overrides: dict = {}
    if args.busy_ms is not None and args.url.startswith("sqlite"):
        overrides = {"pragmas": {"journal_mode": "wal", "busy_timeout": args.busy_ms},
                     "timeout": args.busy_ms / 1000}
    if args.no_retry:
        # One retry budget per call (caravel_lite.retry): 0 turns every layer off.
        overrides["busy_retries"] = 0
    db = open_database(args.url, **overrides)
    if args.busy_window is not None:
        db.retry_policy = dataclasses.replace(policy_of(db), window=args.busy_window)
    return db


def _options(args: argparse.Namespace) -> QueueOptions:
    return QueueOptions(lease_duration=timedelta(seconds=args.lease),
                        max_attempts=args.max_attempts,
                        retry_delay=timedelta(milliseconds=args.retry_ms),
                        max_retry_delay=timedelta(seconds=2))


def _summary(args: argparse.Namespace, **extra: Any) -> None:
    if args.out:
        data = {"pid": os.getpid(), "transient_retries": transient_retries.value, **extra}
        temporary = args.out + ".tmp"
        with open(temporary, "w") as handle:
            json.dump(data, handle)
        os.replace(temporary, args.out)


def _ready(args: argparse.Namespace) -> None:
    """Tell the test that signals are handled now (SIGTERM means a clean stop)."""
    if args.out:
        open(args.out + ".ready", "w").close()


def worker(args: argparse.Namespace) -> int:
    db = _open(args)
    jobs.use_database(db)
    jobs.set_phase_file(args.phase_file)
    queue = PhaseQueue(db, jobs.registry, _options(args))
    queue.ack_delay = args.ack_delay
    stop = threading.Event()
    errors: List[str] = []
    code = 0
    try:
        with handle_signals(stop):
            _ready(args)
            QueueWorker(queue, poll_interval=args.poll).run(jobs.QUEUE, stop=stop,
                                                            max_outage=args.max_outage)
    except peewee.PeeweeException as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
        code = 1
    _summary(args, errors=errors)
    return code


def enqueue(args: argparse.Namespace) -> int:
    db = _open(args)
    queue = DatabaseQueue(db, jobs.registry, _options(args))
    stop = threading.Event()
    accepted: List[str] = []
    errors: List[str] = []
    with handle_signals(stop):
        _ready(args)
        i = 0
        while not stop.is_set() and (args.count is None or i < args.count):
            i += 1
            try:
                result = queue.enqueue(jobs.Work(i, work_ms=args.work_ms),
                                       Dispatch(queue=jobs.QUEUE, tenant_id=jobs.TENANT,
                                                idempotency_key=f"{args.prefix}-{i}"))
                accepted.append(str(result.job_id))
            except peewee.PeeweeException as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                if len(errors) == 1:
                    traceback.print_exc()
            if args.pause_ms:
                stop.wait(args.pause_ms / 1000)
    _summary(args, accepted=accepted, errors=errors)
    return 0


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="tests.faults.child")
    parser.add_argument("mode", choices=("worker", "enqueue"))
    parser.add_argument("--url", required=True)
    parser.add_argument("--out")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--max-attempts", type=int, default=100)
    parser.add_argument("--retry-ms", type=int, default=50)
    parser.add_argument("--poll", type=float, default=0.1)
    parser.add_argument("--max-outage", type=float, default=None,
                        help="ride out database outages this long (default: exit 1)")
    parser.add_argument("--busy-ms", type=int)
    parser.add_argument("--no-retry", action="store_true",
                        help="turn the library's transient-error retry off (negative control)")
    parser.add_argument("--busy-window", type=float,
                        help="seconds after a call began in which a repeat may start "
                             "(default 2: caravel_lite.retry.RetryPolicy.window)")
    parser.add_argument("--phase-file")
    parser.add_argument("--ack-delay", type=float, default=0.0)
    parser.add_argument("--prefix", default="job")
    parser.add_argument("--count", type=int)
    parser.add_argument("--work-ms", type=int, default=0)
    parser.add_argument("--pause-ms", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        return worker(args) if args.mode == "worker" else enqueue(args)
    except Exception:
        traceback.print_exc()
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
