"""``python -m caravel_lite worker MODULE:REGISTRY --queue NAME --database URL``.

Runs a :class:`~caravel_lite.worker.QueueWorker` over the application's
:class:`~caravel_lite.JobRegistry` until SIGTERM or SIGINT. Exit codes: 0 after a clean
stop (a running handler is cancelled and its job left leased for another worker);
1 when the schema is not migrated or the worker faulted on an infrastructure error
(one line on stderr, no traceback); 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import threading
from datetime import timedelta
from typing import Any, Optional

import peewee

from caravel_lite.dialect import open_database
from caravel_lite.errors import InvalidField, SchemaNotReady
from caravel_lite.migrator import check_schema
from caravel_lite.options import QueueOptions
from caravel_lite.queue import DatabaseQueue
from caravel_lite.registry import JobRegistry
from caravel_lite.validation import check_queue
from caravel_lite.worker import QueueWorker, handle_signals

PROG = "caravel_lite worker"


def register(subparsers: Any) -> None:
    """Add the ``worker`` sub-command (called by :mod:`caravel_lite.cli`)."""
    cmd = subparsers.add_parser("worker", help="run a worker until SIGTERM/SIGINT")
    cmd.add_argument("registry", metavar="MODULE:REGISTRY",
                     help="the application's JobRegistry, e.g. myapp.jobs:registry")
    cmd.add_argument("--queue", required=True, help="queue name to work on")
    cmd.add_argument("--database", required=True,
                     help="database URL, e.g. sqlite:///queue.db or postgresql://u@h/db")
    cmd.add_argument("--lease-seconds", type=float, default=None,
                     help="lease duration in seconds (default 300)")
    cmd.add_argument("--poll-interval", type=float, default=1.0,
                     help="seconds to wait when the queue is empty (default 1)")
    cmd.add_argument("--renew-seconds", type=float, default=None,
                     help="renew the lease every S seconds while a handler runs (default off)")
    cmd.add_argument("--log-level", default="INFO",
                     choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                     help="logging level of the caravel_lite logger (default INFO)")
    cmd.set_defaults(run=run_worker)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return code


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_registry(spec: str) -> JobRegistry:
    """Import ``MODULE:ATTRIBUTE`` (the current directory is importable too) and check
    that it names a JobRegistry. Raises ``ValueError`` with a one-line reason."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ValueError(f"expected MODULE:REGISTRY, got {spec!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import {module_name!r}: {_one_line(exc)}") from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ValueError(f"{module_name!r} has no attribute {attribute!r}") from None
    if not isinstance(target, JobRegistry):
        raise ValueError(f"{spec} is a {type(target).__name__}, not a caravel_lite.JobRegistry")
    return target


def _options(args: argparse.Namespace) -> QueueOptions:
    values: dict = {}
    if args.lease_seconds is not None:
        values["lease_duration"] = timedelta(seconds=args.lease_seconds)
        # Keep the default lifetime valid for leases longer than it.
        values["max_lease_lifetime"] = max(timedelta(hours=1), values["lease_duration"])
    if args.renew_seconds is not None:
        values["lease_renewal_interval"] = timedelta(seconds=args.renew_seconds)
    return QueueOptions(**values)


def _configure_logging(level: str) -> None:
    log = logging.getLogger("caravel_lite")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
    log.setLevel(level)


def run_worker(args: argparse.Namespace) -> int:
    try:
        check_queue(args.queue)
        options = _options(args)
        registry = load_registry(args.registry)
    except (InvalidField, ValueError) as exc:
        return _fail(str(exc), 2)
    db: Optional[peewee.Database] = None
    try:
        db = open_database(args.database)
        check_schema(db)
        worker = QueueWorker(DatabaseQueue(db, registry, options),
                             poll_interval=args.poll_interval)
    except SchemaNotReady as exc:
        return _fail(str(exc), 1)
    except InvalidField as exc:
        return _fail(str(exc), 2)
    except peewee.PeeweeException as exc:
        return _fail(f"cannot use the database: {_one_line(exc)}", 1)
    _configure_logging(args.log_level)
    stop = threading.Event()
    try:
        with handle_signals(stop):
            worker.run(args.queue, stop=stop)
    except peewee.PeeweeException as exc:
        return _fail(f"worker faulted: {_one_line(exc)}", 1)
    finally:
        if db is not None and not db.is_closed():
            db.close()
    return 0
