"""``caravel-lite schedules MODULE:ATTR``: list the application's schedules, each with
its last slot enqueued (read from the database: key, job id and state) and its next run
in UTC and in its time zone. Read-only. ``--json``: one JSON object per schedule and
line.

``MODULE:ATTR`` names a QueueScheduler or a callable returning one. Exit codes: 0; 1
when the schema is not migrated or the database failed; 2 for bad arguments.
"""
from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any, Dict, Optional

from caravel_lite.cli import common
from caravel_lite.cli.scheduler import load_scheduler
from caravel_lite.migrator import check_schema
from caravel_lite.schedule_lookup import HORIZON
from caravel_lite.scheduler import ScheduleStatus


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("schedules", help="list schedules, their last and next slots",
                                description=__doc__.replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    cmd.add_argument("target", metavar="MODULE:ATTR",
                     help="the application's QueueScheduler or a callable returning one")
    cmd.add_argument("--json", action="store_true", help="one JSON object per line")
    cmd.set_defaults(run=run)


def _utc(instant: Optional[datetime]) -> Optional[str]:
    return None if instant is None else instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def _local(instant: Optional[datetime]) -> Optional[str]:
    return None if instant is None else instant.isoformat()


def as_json(status: ScheduleStatus) -> Dict[str, Any]:
    last = None
    if status.last_slot is not None:
        last = {"key": status.last_slot.key, "at": _utc(status.last_slot.at),
                "job_id": status.last_job_id, "state": status.last_job_state}
    return {"name": status.name, "schedule": status.description,
            "queue": status.queue_name, "tenant_id": status.tenant_id,
            "timezone": status.timezone,
            "catch_up_seconds": (None if status.catch_up is None
                                 else status.catch_up.total_seconds()),
            "last_slot": last, "next_run": _utc(status.next_run),
            "next_run_local": _local(status.next_run_local)}


def as_text(status: ScheduleStatus) -> str:
    text = common.safe_text
    lines = [f"{status.name}: {text(status.description)}, queue {status.queue_name}, "
             f"tenant {text(status.tenant_id)}"
             + ("" if status.catch_up is None else f", catch-up {status.catch_up}")]
    if status.last_slot is None:
        lines.append(f"  last slot: none in the last {HORIZON} slots")
    else:
        lines.append(f"  last slot: {_utc(status.last_slot.at)} ({text(status.last_slot.key)}), "
                     f"job {text(status.last_job_id)} {text(status.last_job_state)}")
    if status.next_run is None:
        lines.append("  next run:  none")
    else:
        lines.append(f"  next run:  {_utc(status.next_run)} UTC, "
                     f"{_local(status.next_run_local)} {status.timezone}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    scheduler = load_scheduler(args, args.target)
    db = scheduler.queue.db
    try:
        check_schema(db)
        found = scheduler.status()
    finally:
        common.close_quietly(db)
    for status in found:
        print(json.dumps(as_json(status)) if args.json else as_text(status))
    return common.OK
