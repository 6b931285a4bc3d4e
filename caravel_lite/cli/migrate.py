"""``caravel-lite migrate``: apply the pending schema migrations, print
``{"applied": [names]}``. Running it again applies nothing."""
from __future__ import annotations

import argparse
import json

from caravel_lite.cli import common
from caravel_lite.migrator import migrate


def register(subparsers: common.Subparsers) -> None:
    cmd = subparsers.add_parser("migrate", help="apply pending schema migrations",
                                description=__doc__.replace("``", ""))
    common.add_database_argument(cmd)
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    with common.connected(args) as db:
        applied = migrate(db)
    print(json.dumps({"applied": applied}))
    return common.OK
