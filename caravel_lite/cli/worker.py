"""``caravel-lite worker MODULE:ATTR --queue NAME [--queue NAME ...]``: run a worker
until SIGTERM or SIGINT.

``MODULE:ATTR`` names the application's JobRegistry (the queue is then opened on
``--database``, default ``$CARAVEL_DATABASE_URL``), its DatabaseQueue (whose database,
options and telemetry are used), or a callable returning either.

Exit codes: 0 after a clean stop (claimed jobs that did not start are handed back;
running handlers get ``--shutdown-timeout`` to finish, one cancelled leaves its job
leased for another worker); 1 when the schema is not migrated, the login is refused,
the worker faulted, or the database stayed away longer than ``--max-outage``; 2 for
bad arguments. Every failure is one line on stderr.
"""
from __future__ import annotations

import argparse
import threading
from datetime import timedelta
from typing import Any, Dict, List, Optional

import peewee

from caravel_lite.cli import common
from caravel_lite.errors import InvalidField
from caravel_lite.options import QueueOptions
from caravel_lite.cli.operating import duration
from caravel_lite.validation import check_queue


def register(subparsers: common.Subparsers) -> None:
    cmd = subparsers.add_parser("worker", help="run a worker until SIGTERM/SIGINT",
                                description=__doc__.replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("target", metavar="MODULE:ATTR",
                     help="the application's JobRegistry or DatabaseQueue, or a callable "
                          "returning one, e.g. myapp.jobs:registry")
    cmd.add_argument("--queue", required=True, action="append", metavar="NAME",
                     dest="queue_names",
                     help="a queue to work on; repeat it for several (earlier ones first, "
                          "every queue still served under load)")
    common.add_database_argument(cmd, what="the queue database (with a JobRegistry)")
    cmd.add_argument("--concurrency", type=int, default=1, metavar="N",
                     help="jobs run at once: N handler threads, or N tasks on one event "
                          "loop for async handlers (default 1)")
    cmd.add_argument("--prefetch", type=int, default=None, metavar="N",
                     help="jobs leased ahead of free slots, 1..100 (default: judged from "
                          "recent handler durations)")
    cmd.add_argument("--shutdown-timeout", type=float, default=None, metavar="S",
                     help="on SIGTERM, how long running handlers get to finish "
                          "(default 10)")
    common.add_max_outage_argument(cmd)
    cmd.add_argument("--lease-seconds", type=float, default=None, metavar="S",
                     help="lease duration in seconds (default 300; with a JobRegistry)")
    cmd.add_argument("--renew-seconds", type=float, default=None, metavar="S",
                     help="renew the lease every S seconds while a handler runs "
                          "(default off; with a JobRegistry)")
    cmd.add_argument("--poll-interval", type=float, default=1.0, metavar="S",
                     help="how often an idle worker re-reads its queues when no change "
                          "signal woke it (default 1)")
    cmd.add_argument("--scheduler", default=None, metavar="MODULE:ATTR",
                     help="also run this QueueScheduler (or a callable returning one) on a "
                          "thread of its own in this process; it stops with the worker")
    cmd.add_argument("--prune-after", type=duration, default=None, metavar="AGE",
                     help="while idle, delete this queue's jobs finished longer ago than "
                          "AGE (7d, 12h; at least 1m), a small batch at a time; default "
                          "off. Pruned idempotency keys lose their duplicate protection")
    cmd.add_argument("--record-errors", action="store_true",
                     help="store each failed attempt's exception message (at most 1 KiB) "
                          "and a short traceback; only where messages hold no secrets "
                          "(with a JobRegistry; a DatabaseQueue brings its own options)")
    common.add_log_level_argument(cmd)
    cmd.set_defaults(run=run)


def _seconds(flag: str, value: float) -> timedelta:
    try:
        return timedelta(seconds=value)
    except (OverflowError, ValueError):  # 1e300, nan: no timedelta holds them
        raise common.UsageError(f"argument {flag}: {value} seconds is out of range") from None


def _options(args: argparse.Namespace) -> Optional[QueueOptions]:
    values: Dict[str, Any] = {}
    if args.lease_seconds is not None:
        values["lease_duration"] = _seconds("--lease-seconds", args.lease_seconds)
        # Keep the default lifetime valid for leases longer than it.
        values["max_lease_lifetime"] = max(timedelta(hours=1), values["lease_duration"])
    if args.renew_seconds is not None:
        values["lease_renewal_interval"] = _seconds("--renew-seconds", args.renew_seconds)
    if args.record_errors:
        values["record_errors"] = True
    try:
        return QueueOptions(**values) if values else None
    except (InvalidField, ValueError, OverflowError) as exc:
        raise common.UsageError(common.one_line(exc)) from None


def _option_flags(args: argparse.Namespace) -> List[str]:
    return [flag for flag, value in (("--lease-seconds", args.lease_seconds),
                                     ("--renew-seconds", args.renew_seconds),
                                     ("--record-errors", args.record_errors or None))
            if value is not None]


def run(args: argparse.Namespace) -> int:
    from caravel_lite.cli.scheduler import start_beside
    from caravel_lite.worker import QueueWorker, handle_signals

    try:
        for name in args.queue_names:
            check_queue(name)
    except InvalidField as exc:
        raise common.UsageError(common.one_line(exc)) from None
    max_outage = common.max_outage_of(args)
    args.max_outage = max_outage  # what --scheduler inherits (None: no riding out)
    queue = common.load_queue(args, args.target, _options(args), _option_flags(args))
    try:
        settings: Dict[str, Any] = {"prune": args.prune_after,
                                    "concurrency": args.concurrency, "prefetch": args.prefetch,
                                    "poll_interval": args.poll_interval}
        if args.shutdown_timeout is not None:
            settings["shutdown_timeout"] = args.shutdown_timeout
        try:
            worker = QueueWorker(queue, **settings)
        except InvalidField as exc:
            raise common.UsageError(common.one_line(exc)) from None
        common.configure_logging(args.log_level)
        stop = threading.Event()
        with handle_signals(stop):
            try:
                if not common.wait_for_schema(queue, stop, max_outage, "worker"):
                    return common.OK  # stopped while the database was away
            except peewee.PeeweeException as exc:
                raise common.outage_fault(queue, exc, max_outage, "worker") from exc
            beside = start_beside(args, args.scheduler, stop)
            try:
                worker.run(args.queue_names, stop=stop, max_outage=max_outage)
            except InvalidField as exc:  # the queue names, as the worker judges them
                raise common.UsageError(common.one_line(exc)) from None
            except peewee.PeeweeException as exc:
                raise common.outage_fault(queue, exc, max_outage, "worker") from exc
            finally:
                stop.set()  # the scheduler stops with the worker, whatever ended it
                for thread in beside:
                    thread.join()
        for thread in beside:
            thread.raise_fault()  # a scheduler fault stopped the worker: exit 1
    finally:
        common.close_quietly(queue.db)
    return common.OK
