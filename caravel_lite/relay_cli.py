"""``python -m caravel_lite relay MODULE:REGISTRY --app-database URL --database URL``.

Runs an :class:`~caravel_lite.relay.OutboxRelay` from the application database's
outbox into the queue database until SIGTERM or SIGINT (exit 0), or one pass with
``--once``. A database failure ends it with exit code 1 and one line on stderr, so a
service manager can restart it; undispatched intents simply wait.
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import signal
import sys
import threading
from typing import Any, List, Optional

import peewee

from caravel_lite.dialect import open_database
from caravel_lite.errors import CaravelError, SchemaNotReady
from caravel_lite.migrator import check_schema
from caravel_lite.options import QueueOptions
from caravel_lite.queue import DatabaseQueue
from caravel_lite.registry import JobRegistry
from caravel_lite.relay import MAX_BATCH, OutboxRelay

PROG = "caravel_lite relay"


def load_registry(spec: str) -> JobRegistry:
    """Import ``module:attribute`` (attribute may be dotted) and return the registry.
    The relay only accepts wire names registered there."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:REGISTRY, got {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not isinstance(target, JobRegistry):
        raise ValueError(f"{spec} is a {type(target).__name__}, not a caravel_lite.JobRegistry")
    return target


def _positive_int(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_BATCH:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_BATCH}")
    return value


def _interval(text: str) -> float:
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("must be a number of seconds in (0, 3600]")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    cmd = subparsers.add_parser(
        "relay", help="dispatch committed outbox intents into the queue",
        description="Move committed outbox intents from the application database into "
                    "the queue database. Exit 0 after SIGTERM/SIGINT or --once; exit 1 "
                    "when a database fails.")
    cmd.add_argument("registry", metavar="MODULE:REGISTRY",
                     help="the JobRegistry naming every job type the outbox may hold")
    cmd.add_argument("--app-database", required=True, help="URL of the database holding "
                     "the outbox (e.g. postgresql://app@host/app)")
    cmd.add_argument("--database", required=True, help="URL of the queue database")
    cmd.add_argument("--batch-size", type=_positive_int, default=100,
                     help=f"intents per pass, 1..{MAX_BATCH} (default 100)")
    cmd.add_argument("--poll-interval", type=_interval, default=1.0,
                     help="seconds to wait when the outbox is drained (default 1)")
    cmd.add_argument("--max-payload-bytes", type=int, default=None,
                     help="the queue's payload limit; larger intents are set aside "
                          "(default 65536)")
    cmd.add_argument("--once", action="store_true",
                     help="run one pass, print {\"marked\": N, ...} and exit")
    cmd.set_defaults(run=run)


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 1


def _describe(exc: BaseException) -> str:
    # The first line only: driver messages can run on for pages.
    text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        registry = load_registry(args.registry)
    except (ImportError, AttributeError, ValueError) as exc:
        return _fail(f"cannot load {args.registry}: {_describe(exc)}")
    try:
        options = (QueueOptions(max_payload_bytes=args.max_payload_bytes)
                   if args.max_payload_bytes is not None else None)
    except ValueError as exc:
        return _fail(f"--max-payload-bytes: {exc}")
    app_db = open_database(args.app_database)
    queue_db = open_database(args.database)
    try:
        check_schema(app_db)
        check_schema(queue_db)
        relay = OutboxRelay(app_db, DatabaseQueue(queue_db, registry, options))
        if args.once:
            marked = relay.run_once(args.batch_size)
            counts = relay.status()
            print(json.dumps({"marked": marked, "pending": counts.pending,
                              "dispatched": counts.dispatched, "set_aside": counts.set_aside,
                              "set_aside_reasons": dict(counts.set_aside_reasons)}))
            return 0
        error = _run_until_signalled(relay, args)
        if error is not None:
            raise error
        return 0
    except SchemaNotReady as exc:
        return _fail(str(exc))
    except (peewee.DatabaseError, peewee.InterfaceError, OSError) as exc:
        return _fail(f"stopped: database failure ({_describe(exc)})")
    except CaravelError as exc:
        return _fail(_describe(exc))
    finally:
        for db in (app_db, queue_db):
            if not db.is_closed():
                db.close()


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
            for db in (relay.db, relay.queue.db):
                if not db.is_closed():
                    db.close()

    def request_stop(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
        stop.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    worker = threading.Thread(target=loop, name="caravel-relay")
    try:
        worker.start()
        while worker.is_alive():
            worker.join(0.2)
    finally:
        stop.set()
        worker.join()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return failure[0] if failure else None
