"""``python -m caravel_lite.sample FLAG``: one flag, one JSON line on stdout.

Exit codes: 0 success; 1 the databases are not migrated, a database failed or the
worker faulted; 2 usage or configuration error; 73 the crash hook fired.
"""
from __future__ import annotations

import json
import logging
import sys
import threading
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, TextIO

import peewee

from caravel_lite.logfields import fields
from caravel_lite.sample import QUEUE
from caravel_lite.sample.app import NotMigrated, SampleApp, read_only_counts
from caravel_lite.sample.config import ConfigError, SampleConfig, from_environment

if TYPE_CHECKING:
    from caravel_lite.worker import QueueWorker

USAGE = """\
usage: python -m caravel_lite.sample FLAG

Exactly one flag:
  --migrate        apply the queue and results migrations
  --check-model    fail unless both databases are fully migrated
  --enqueue-demo   enqueue quantities 1, 2 and 3 (keys demo-1..demo-3)
  --work-once      process at most one job
  --work           process jobs until SIGTERM or SIGINT
  --report         count and sum the saved results
  --enqueue-tallies  enqueue tally jobs 1, 2 and 3 (keys tally-1..tally-3)
  --tally-report   count and sum the tallies (written in ctx.transaction())
  --queue-status   read-only queue counts (never creates a database)
  --demo           the whole story in a fresh temporary directory

Data lives in queue.db and results.db in the absolute, existing directory named by
CARAVEL_WORKER_DIRECTORY, or in the server databases named by
CARAVEL_WORKER_DATABASE_URL (and CARAVEL_WORKER_RESULTS_URL).
"""

log = logging.getLogger("caravel_lite.sample")


def _emit(value: object, out: TextIO) -> None:
    out.write(json.dumps(value) + "\n")
    out.flush()


def migrate(config: SampleConfig, out: TextIO) -> int:
    _emit({"applied": SampleApp(config).migrate()}, out)
    return 0


def check_model(config: SampleConfig, out: TextIO) -> int:
    pending = SampleApp(config).pending()
    if pending:
        _emit({"pending_migrations": True, "pending": pending}, out)
        return 1
    _emit({"pending_migrations": False}, out)
    return 0


def enqueue_demo(config: SampleConfig, out: TextIO) -> int:
    app = SampleApp(config)
    app.require_migrated()
    _emit([{"job_id": str(result.job_id), "already_enqueued": result.already_enqueued}
           for result in app.enqueue_demo()], out)
    return 0


def _worker(app: SampleApp) -> "QueueWorker":
    # Imported here: every other flag works without the worker module.
    from caravel_lite.worker import QueueWorker

    return QueueWorker(app.queue)


def work_once(config: SampleConfig, out: TextIO) -> int:
    app = SampleApp(config)
    app.require_migrated()
    worker = _worker(app)
    try:
        claimed = worker.run_once(QUEUE)
    finally:
        app.queue_db.close()
        app.results_db.close()
    _emit({"claimed": bool(claimed)}, out)
    return 0


def work(config: SampleConfig, out: TextIO) -> int:
    from caravel_lite.worker import handle_signals

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = SampleApp(config)
    app.require_migrated()
    worker = _worker(app)
    stop = threading.Event()
    log.info("sample worker started on queue %s (%s); stop it with SIGTERM or Ctrl+C",
             QUEUE, config.describe(), extra=fields(queue=QUEUE))
    with handle_signals(stop):
        try:
            worker.run(QUEUE, stop=stop)
        except Exception as exc:  # the worker faulted: tell the service manager
            log.error("sample worker faulted: %s", type(exc).__name__,
                      extra=fields(queue=QUEUE, error_type=type(exc).__name__))
            return 1
    log.info("sample worker stopped cleanly", extra=fields(queue=QUEUE))
    return 0


def report(config: SampleConfig, out: TextIO) -> int:
    app = SampleApp(config)
    app.require_migrated()
    _emit(app.report(), out)
    return 0


def enqueue_tallies(config: SampleConfig, out: TextIO) -> int:
    app = SampleApp(config)
    app.require_migrated()
    _emit([{"job_id": str(result.job_id), "already_enqueued": result.already_enqueued}
           for result in app.enqueue_tallies()], out)
    return 0


def tally_report(config: SampleConfig, out: TextIO) -> int:
    app = SampleApp(config)
    app.require_migrated()
    _emit(app.tally_report(), out)
    return 0


def queue_status(config: SampleConfig, out: TextIO) -> int:
    counts = read_only_counts(config)
    observed = counts.observed_at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    _emit({"observed_at": observed, "ready": counts.ready, "delayed": counts.delayed,
           "active_leases": counts.active_leases, "expired_leases": counts.expired_leases,
           "dead_letter": counts.dead_letter, "completed": counts.completed}, out)
    return 0


def demo(out: TextIO) -> int:
    from caravel_lite.sample.demo import run_demo

    return run_demo(out)


COMMANDS: Dict[str, Callable[[SampleConfig, TextIO], int]] = {
    "--migrate": migrate,
    "--check-model": check_model,
    "--enqueue-demo": enqueue_demo,
    "--work-once": work_once,
    "--work": work,
    "--report": report,
    "--enqueue-tallies": enqueue_tallies,
    "--tally-report": tally_report,
    "--queue-status": queue_status,
}
FLAGS = tuple(COMMANDS) + ("--demo",)


def main(argv: Optional[List[str]] = None, out: Optional[TextIO] = None,
         err: Optional[TextIO] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    out = out or sys.stdout
    err = err or sys.stderr
    if len(argv) != 1 or argv[0] not in FLAGS:
        problem = ("expected exactly one flag" if len(argv) != 1
                   else f"unknown flag {argv[0]!r}")
        err.write(f"caravel_lite.sample: {problem}\n\n{USAGE}")
        return 2
    flag = argv[0]
    try:
        if flag == "--demo":
            return demo(out)
        config = from_environment()
        return COMMANDS[flag](config, out)
    except ConfigError as exc:
        err.write(f"caravel_lite.sample: {exc}\n")
        return 2
    except NotMigrated as exc:
        err.write(f"caravel_lite.sample: {exc}\n")
        return 1
    except (peewee.PeeweeException, OSError) as exc:
        err.write(f"caravel_lite.sample: {flag} failed: {type(exc).__name__}: {exc}\n")
        return 1
