"""``caravel-lite discard JOB_ID...``: move waiting jobs (PENDING, any tenant) to the
dead letters with the failure ``discarded``, so that they never run unless replayed.
A leased (running) job cannot be discarded. ``--dry-run`` changes nothing."""
from __future__ import annotations

import argparse

from caravel_lite.cli import acting, operating
from caravel_lite.values import JobState


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cmd = subparsers.add_parser("discard", help="dead-letter waiting jobs without running them",
                                description=__doc__.replace("``", ""))
    operating.add_database_and_json(cmd)
    acting.add_ids(cmd)
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with operating.AdminSession(args) as admin:
        return acting.on_ids(args, admin, "discarded", admin.discard,
                             lambda state: state is JobState.PENDING,
                             "only waiting jobs can be discarded")
