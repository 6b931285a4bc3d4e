"""``caravel-lite relay MODULE:ATTR``: move committed outbox intents from the
application database (``--app-database``, default ``$CARAVEL_APP_DATABASE_URL``) into
the queue until SIGTERM or SIGINT (exit 0), or for one pass with ``--once`` (printing
``{"marked": N, ...}``).

``MODULE:ATTR`` names the JobRegistry of every job type the outbox may hold (the queue
is then opened on ``--database``, default ``$CARAVEL_DATABASE_URL``), the application's
DatabaseQueue, or a callable returning either. A database failure ends the relay with
exit code 1 and one line on stderr, so a service manager can restart it; undispatched
intents simply wait. Bad arguments exit 2.
"""
from __future__ import annotations

import argparse
import json
import signal
import threading
from types import FrameType
from typing import List, Optional

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
    app_url = common.database_url(args, "--app-database", common.APP_DATABASE_ENV)
    assert app_url is not None
    app_db = common.open_url(app_url, "--app-database")
    flags = ["--max-payload-bytes"] if args.max_payload_bytes is not None else []
    queue = common.load_queue(args, args.target, _options(args), flags)
    common.configure_logging(args.log_level)
    try:
        check_schema(app_db)
        check_schema(queue.db)
        relay = OutboxRelay(app_db, queue)
        if args.once:
            marked = relay.run_once(args.batch_size)
            counts = relay.status()
            print(json.dumps({"marked": marked, "pending": counts.pending,
                              "dispatched": counts.dispatched, "set_aside": counts.set_aside,
                              "set_aside_reasons": dict(counts.set_aside_reasons)}))
            return common.OK
        error = _run_until_signalled(relay, args)
        if error is not None:
            raise common.CommandFailed(f"stopped: {common.described(error)}") from error
        return common.OK
    finally:
        common.close_quietly(app_db, queue.db)


def _run_until_signalled(relay: OutboxRelay, args: argparse.Namespace
                         ) -> Optional[BaseException]:
    """Run the relay loop in a thread until SIGTERM/SIGINT or a failure; returns the
    failure, if any.

    The loop runs off the main thread because signal handlers run on the main thread:
    setting the stop event from a handler that interrupted ``Event.wait`` on the same
    thread could deadlock on the event's own lock.
    """
    stop = threading.Event()
    failure: List[BaseException] = []

    def loop() -> None:
        try:
            relay.run(stop, poll_interval=args.poll_interval, batch_size=args.batch_size)
        except BaseException as exc:  # handed to the main thread, which reports it
            failure.append(exc)
        finally:
            # Peewee connections belong to the thread that opened them.
            common.close_quietly(relay.db, relay.queue.db)

    def request_stop(signum: int, frame: Optional[FrameType]) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    thread = threading.Thread(target=loop, name="caravel-relay")
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.2)
    finally:
        stop.set()
        thread.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return failure[0] if failure else None
