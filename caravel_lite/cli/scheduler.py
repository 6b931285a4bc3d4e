"""``caravel-lite scheduler MODULE:ATTR``: enqueue the application's recurring jobs until
SIGTERM or SIGINT.

``MODULE:ATTR`` names the application's QueueScheduler, or a callable returning one
(called once, without arguments); the scheduler brings its queue and database. Run as
many as you like, on as many machines: they converge on one job per slot. With
``--once``, one pass and exit, printing ``{"enqueued": N}`` (for an external cron; a
cron schedule run that way needs a catch_up at least as long as the time between
passes, since an occurrence before the process started is a missed slot).

A database outage is ridden out for up to --max-outage seconds (default 60). Exit
codes: 0 after a clean stop; 1 when the schema is not migrated, the database stayed
unavailable, or (with --once) a slot's job exists with another payload (the other due
slots are enqueued first); 2 for bad arguments. Always one line on stderr.
"""
from __future__ import annotations

import argparse
import json
import threading
from datetime import timedelta
from typing import List, Optional, Sequence

import peewee

from caravel_lite.cli import common
from caravel_lite.migrator import check_schema
from caravel_lite.outage import check_max_outage
from caravel_lite.scheduler import QueueScheduler


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("scheduler", help="enqueue recurring jobs until SIGTERM/SIGINT",
                                description=__doc__.replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("target", metavar="MODULE:ATTR",
                     help="the application's QueueScheduler or a callable returning one, "
                          "e.g. myapp.schedules:scheduler")
    cmd.add_argument("--once", action="store_true",
                     help="enqueue what is due now, print {\"enqueued\": N} and exit")
    common.add_max_outage_argument(cmd)
    common.add_log_level_argument(cmd)
    cmd.set_defaults(run=run)


def load_scheduler(args: argparse.Namespace, spec: str) -> QueueScheduler:
    """The QueueScheduler named by ``spec`` (or returned by the callable it names); its
    database's password is masked in everything the command writes."""
    target = common.load_target(spec)
    if callable(target) and not isinstance(target, (type, QueueScheduler)):
        target = target()  # a factory; a class is never instantiated on the user's behalf
    if not isinstance(target, QueueScheduler):
        raise common.UsageError(f"{spec} is a {type(target).__name__}; expected a "
                                "caravel_lite.QueueScheduler or a callable returning one")
    common.masker_of(args).add_secret(
        getattr(target.queue.db, "connect_params", {}).get("password"))
    return target


def _fault(scheduler: QueueScheduler, exc: BaseException,
           max_outage: Optional[float]) -> common.CommandFailed:
    return common.outage_fault(scheduler.queue, exc, max_outage, "scheduler")


def run(args: argparse.Namespace) -> int:
    from caravel_lite.worker import handle_signals

    max_outage = common.max_outage_of(args)
    scheduler = load_scheduler(args, args.target)
    try:
        common.configure_logging(args.log_level)
        if args.once:
            try:
                check_schema(scheduler.queue.db)
                print(json.dumps({"enqueued": scheduler.run_once()}))
            except peewee.PeeweeException as exc:
                raise _fault(scheduler, exc, None) from exc
            return common.OK
        stop = threading.Event()
        with handle_signals(stop):
            try:
                if common.wait_for_schema(scheduler.queue, stop, max_outage, "scheduler"):
                    scheduler.run(stop=stop, max_outage=max_outage)
            except peewee.PeeweeException as exc:
                raise _fault(scheduler, exc, max_outage) from exc
    finally:
        common.close_quietly(scheduler.queue.db)
    return common.OK


class SchedulerThread:
    """``scheduler.run(stop)`` on a thread of its own beside a worker: a fault sets
    ``stop`` too (so the worker stops) and is kept in ``error`` for the command to
    report."""

    def __init__(self, scheduler: QueueScheduler, stop: threading.Event,
                 max_outage: Optional[float] = None) -> None:
        self.scheduler = scheduler
        self.stop = stop
        self.max_outage = max_outage
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._main, name="caravel-scheduler",
                                        daemon=True)

    def _main(self) -> None:
        try:
            self.scheduler.run(stop=self.stop, max_outage=self.max_outage)
        except BaseException as exc:  # reported by the command after the worker stops
            self.error = exc
            self.stop.set()
        finally:
            common.close_quietly(self.scheduler.queue.db)  # this thread's connection

    def start(self) -> "SchedulerThread":
        self._thread.start()
        return self

    def join(self, timeout: float = 30.0) -> None:
        """Wait for the thread to end (``stop`` must be set)."""
        self._thread.join(timeout)

    def raise_fault(self) -> None:
        """Raise CommandFailed if the scheduler faulted."""
        if self.error is not None:
            raise _fault(self.scheduler, self.error, self.max_outage) from self.error


def _check_pruning(scheduler: QueueScheduler, prune_after: Optional[timedelta],
                   queue_names: Optional[Sequence[str]]) -> None:
    """A worker that prunes its queues must keep their schedules' keys long enough
    (README, Recurring jobs: retention), or a pruned slot would run again."""
    if prune_after is None:
        return
    needed = scheduler.min_prune_age(queue_names)
    if prune_after < needed:
        raise common.UsageError(
            f"--prune-after {prune_after} is shorter than {needed}, the longest interval "
            f"or catch-up window of the --scheduler's schedules on these queues: a pruned "
            f"slot would run again")


def start_beside(args: argparse.Namespace, spec: Optional[str],
                 stop: threading.Event) -> List[SchedulerThread]:
    """For ``worker --scheduler MODULE:ATTR``: the scheduler, checked against its schema
    and started on its own thread with the worker's stop event (none without a spec).
    It rides out database outages as long as the worker does (``--max-outage``)."""
    if spec is None:
        return []
    scheduler = load_scheduler(args, spec)
    _check_pruning(scheduler, getattr(args, "prune_after", None),
                   getattr(args, "queue_names", None))
    max_outage = check_max_outage(getattr(args, "max_outage", None))
    if not common.wait_for_schema(scheduler.queue, stop, max_outage, "scheduler"):
        return []  # stopped while the database was away
    return [SchedulerThread(scheduler, stop, max_outage).start()]
