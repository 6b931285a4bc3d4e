"""``caravel-lite relay MODULE:ATTR``: move committed outbox intents from the
application database (``--app-database``, default ``$CARAVEL_APP_DATABASE_URL``) into
the queue until SIGTERM or SIGINT (exit 0), or for one pass with ``--once`` (printing
``{"marked": N, ...}``).

``MODULE:ATTR`` names the JobRegistry of every job type the outbox may hold (the queue
is then opened on ``--database``, default ``$CARAVEL_DATABASE_URL``), the application's
DatabaseQueue, or a callable returning either. A database that goes away is waited for
up to ``--max-outage`` seconds (default 60); after that, or at once on a refused login
or a missing schema, the relay exits 1 with one line on stderr, so a service manager
can restart it; undispatched intents simply wait. Bad arguments exit 2.
"""
from __future__ import annotations

import argparse
import json
import threading
from typing import Optional

import peewee

from caravel_lite.cli import common
from caravel_lite.migrator import check_schema
from caravel_lite.options import QueueOptions
from caravel_lite.relay import MAX_BATCH, OutboxRelay


def _batch_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_BATCH}")
    return value


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("must be a number of seconds in (0, 3600]")
    return value


def register(subparsers: common.Subparsers) -> None:
    cmd = subparsers.add_parser("relay", help="dispatch committed outbox intents into the queue",
                                description=__doc__.replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("target", metavar="MODULE:ATTR",
                     help="the JobRegistry naming every job type the outbox may hold, the "
                          "application's DatabaseQueue, or a callable returning one")
    common.add_database_argument(cmd, "--app-database", common.APP_DATABASE_ENV,
                                 what="the database holding the outbox")
    common.add_database_argument(cmd, what="the queue database (with a JobRegistry)")
    cmd.add_argument("--batch-size", type=_batch_size, default=100, metavar="N",
                     help=f"intents per pass, 1..{MAX_BATCH} (default 100)")
    cmd.add_argument("--poll-interval", type=_interval, default=1.0, metavar="S",
                     help="seconds to wait when the outbox is drained (default 1)")
    cmd.add_argument("--max-payload-bytes", type=int, default=None, metavar="N",
                     help="the queue's payload limit; larger intents are set aside "
                          "(default 65536; with a JobRegistry)")
    common.add_max_outage_argument(cmd, what="an outage of either database")
    cmd.add_argument("--once", action="store_true",
                     help="run one pass, print {\"marked\": N, ...} and exit")
    common.add_log_level_argument(cmd)
    cmd.set_defaults(run=run)


def _options(args: argparse.Namespace) -> Optional[QueueOptions]:
    if args.max_payload_bytes is None:
        return None
    try:
        return QueueOptions(max_payload_bytes=args.max_payload_bytes)
    except ValueError as exc:
        raise common.UsageError(f"--max-payload-bytes: {common.one_line(exc)}") from None


def run(args: argparse.Namespace) -> int:
    from caravel_lite.worker import handle_signals

    app_url = common.database_url(args, "--app-database", common.APP_DATABASE_ENV)
    assert app_url is not None
    app_db = common.open_url(app_url, "--app-database")
    max_outage = common.max_outage_of(args)
    flags = ["--max-payload-bytes"] if args.max_payload_bytes is not None else []
    queue = common.load_queue(args, args.target, _options(args), flags)
    common.configure_logging(args.log_level)
    try:
        relay = OutboxRelay(app_db, queue)
        if args.once:  # one pass, for a cron job: no waiting for a database
            check_schema(app_db)
            check_schema(queue.db)
            marked = relay.run_once(args.batch_size)
            counts = relay.status()
            print(json.dumps({"marked": marked, "pending": counts.pending,
                              "dispatched": counts.dispatched, "set_aside": counts.set_aside,
                              "set_aside_reasons": dict(counts.set_aside_reasons)}))
            return common.OK
        stop = threading.Event()
        # SIGTERM/SIGINT set ``stop`` from a helper thread, so the loop may wait on it in
        # this thread (a second SIGINT interrupts at once).
        with handle_signals(stop):
            try:
                if common.wait_for_schema(queue, stop, max_outage, "relay", others=[app_db]):
                    relay.run(stop, poll_interval=args.poll_interval,
                              batch_size=args.batch_size, max_outage=max_outage)
            except (peewee.PeeweeException, OSError) as exc:
                raise common.outage_fault(queue, exc, max_outage, "relay",
                                          others=[app_db]) from exc
        return common.OK
    finally:
        common.close_quietly(app_db, queue.db)
