"""``caravel-lite worker MODULE:ATTR --queue NAME``: run a worker until SIGTERM or
SIGINT.

``MODULE:ATTR`` names the application's JobRegistry (the queue is then opened on
``--database``, default ``$CARAVEL_DATABASE_URL``), its DatabaseQueue (whose database,
options and telemetry are used), or a callable returning either.

Exit codes: 0 after a clean stop (a running handler is cancelled and its job left
leased for another worker); 1 when the schema is not migrated or the worker faulted
on an infrastructure error; 2 for bad arguments. Always one line on stderr.
"""
from __future__ import annotations

import argparse
import threading
from datetime import timedelta
from typing import Any, Dict, List, Optional

import peewee

from caravel_lite.cli import common
from caravel_lite.errors import InvalidField
from caravel_lite.migrator import check_schema
from caravel_lite.options import QueueOptions
from caravel_lite.validation import check_queue


def register(subparsers: common.Subparsers) -> None:
    cmd = subparsers.add_parser("worker", help="run a worker until SIGTERM/SIGINT",
                                description=__doc__.replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("target", metavar="MODULE:ATTR",
                     help="the application's JobRegistry or DatabaseQueue, or a callable "
                          "returning one, e.g. myapp.jobs:registry")
    cmd.add_argument("--queue", required=True, metavar="NAME", dest="queue_name",
                     help="name of the queue to work on")
    common.add_database_argument(cmd, what="the queue database (with a JobRegistry)")
    cmd.add_argument("--prefetch", type=int, default=1, metavar="N",
                     help="jobs leased per claim, 1..100 (default 1)")
    cmd.add_argument("--lease-seconds", type=float, default=None, metavar="S",
                     help="lease duration in seconds (default 300; with a JobRegistry)")
    cmd.add_argument("--renew-seconds", type=float, default=None, metavar="S",
                     help="renew the lease every S seconds while a handler runs "
                          "(default off; with a JobRegistry)")
    cmd.add_argument("--poll-interval", type=float, default=1.0, metavar="S",
                     help="seconds to wait when the queue is empty (default 1)")
    cmd.add_argument("--scheduler", default=None, metavar="MODULE:ATTR",
                     help="also run this QueueScheduler (or a callable returning one) on a "
                          "thread of its own in this process; it stops with the worker")
    common.add_log_level_argument(cmd)
    cmd.set_defaults(run=run)


def _options(args: argparse.Namespace) -> Optional[QueueOptions]:
    values: Dict[str, Any] = {}
    if args.lease_seconds is not None:
        values["lease_duration"] = timedelta(seconds=args.lease_seconds)
        # Keep the default lifetime valid for leases longer than it.
        values["max_lease_lifetime"] = max(timedelta(hours=1), values["lease_duration"])
    if args.renew_seconds is not None:
        values["lease_renewal_interval"] = timedelta(seconds=args.renew_seconds)
    try:
        return QueueOptions(**values) if values else None
    except (InvalidField, ValueError, OverflowError) as exc:
        raise common.UsageError(common.one_line(exc)) from None


def _option_flags(args: argparse.Namespace) -> List[str]:
    return [flag for flag, value in (("--lease-seconds", args.lease_seconds),
                                     ("--renew-seconds", args.renew_seconds))
            if value is not None]


def run(args: argparse.Namespace) -> int:
    from caravel_lite.cli.scheduler import start_beside
    from caravel_lite.worker import QueueWorker, handle_signals

    try:
        check_queue(args.queue_name)
    except InvalidField as exc:
        raise common.UsageError(common.one_line(exc)) from None
    queue = common.load_queue(args, args.target, _options(args), _option_flags(args))
    try:
        try:
            worker = QueueWorker(queue, poll_interval=args.poll_interval,
                                 prefetch=args.prefetch)
        except InvalidField as exc:
            raise common.UsageError(common.one_line(exc)) from None
        check_schema(queue.db)
        common.configure_logging(args.log_level)
        stop = threading.Event()
        beside = start_beside(args, args.scheduler, stop)
        try:
            with handle_signals(stop):
                worker.run(args.queue_name, stop=stop)
        except peewee.PeeweeException as exc:
            raise common.CommandFailed(f"worker faulted: {common.described(exc)}") from exc
        finally:
            stop.set()  # the scheduler stops with the worker, whatever ended it
            for thread in beside:
                thread.join()
        for thread in beside:
            thread.raise_fault()  # a scheduler fault stopped the worker: exit 1
    finally:
        common.close_quietly(queue.db)
    return common.OK
