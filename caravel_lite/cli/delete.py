"""``caravel-lite delete JOB_ID...``: delete jobs of any tenant with their failure
history, unless leased (running). A deleted job's idempotency key is forgotten: the
same key then makes a new job. ``--dry-run`` changes nothing."""
from __future__ import annotations

import argparse

from caravel_lite.cli import acting, operating
from caravel_lite.values import JobState


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("delete", help="delete jobs that are not running",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    acting.add_ids(cmd)
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with operating.AdminSession(args) as admin:
        return acting.on_ids(args, admin, "deleted", admin.delete,
                             lambda state: state is not JobState.LEASED,
                             "a leased job is running")
