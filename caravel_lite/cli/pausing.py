"""``caravel-lite pause QUEUE...`` stops workers claiming from those queues (within
2 s; running jobs finish, enqueue goes on, other queues are served);
``caravel-lite resume QUEUE...`` lets them claim again (within 2 s). Each prints one
line per queue (``--json``: one object); ``queues`` shows which are paused."""
from __future__ import annotations

import argparse
from typing import Callable

from caravel_lite.admin import QueueAdmin
from caravel_lite.cli import common, operating
from caravel_lite.errors import InvalidField
from caravel_lite.validation import check_queue


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    for name, verb, act in (("pause", "paused", _pause), ("resume", "resumed", _resume)):
        cmd = subparsers.add_parser(name, help=f"{name} queues (workers stop/start "
                                               f"claiming within 2 s)",
                                    description=__doc__.replace("``", ""))
        operating.add_database_and_json(cmd)
        cmd.add_argument("queue_names", nargs="+", metavar="QUEUE")
        cmd.set_defaults(run=_runner(verb, act))


def _pause(admin: QueueAdmin, name: str) -> bool:
    return admin.pause(name)


def _resume(admin: QueueAdmin, name: str) -> bool:
    return admin.resume(name)


def _runner(verb: str, act: Callable[[QueueAdmin, str], bool]
            ) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        try:
            for name in args.queue_names:
                check_queue(name)
        except InvalidField as exc:
            raise common.UsageError(common.one_line(exc)) from None
        with operating.AdminSession(args) as admin:
            for name in args.queue_names:
                changed = act(admin, name)
                if args.json:
                    operating.print_json({"queue": name, verb: True, "changed": changed})
                else:
                    print(f"{common.safe_text(name)} {verb}"
                          f"{'' if changed else ' (already)'}")
        return common.OK
    return run
