"""``caravel-lite check``: exit 0 when every migration is applied, else 1 naming the
pending ones (on stderr, and as ``{"pending_migrations": true, "pending": [...]}`` on
stdout). Never changes the database, nor creates a SQLite file that is not there."""
from __future__ import annotations

import argparse
import json

from caravel_lite.cli import common
from caravel_lite.errors import SchemaNotReady
from caravel_lite.migrator import check_schema


def register(subparsers: common.Subparsers) -> None:
    cmd = subparsers.add_parser("check", help="fail unless the schema is fully migrated",
                                description=__doc__.replace("``", ""))
    common.add_database_argument(cmd)
    cmd.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    try:
        with common.connected(args, existing=True) as db:
            check_schema(db)
    except SchemaNotReady as exc:
        print(json.dumps({"pending_migrations": True, "pending": list(exc.pending)}))
        raise
    print(json.dumps({"pending_migrations": False}))
    return common.OK
