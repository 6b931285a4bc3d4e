"""``python -m caravel_lite``: migrate and check a database (workers and relays add
their own sub-commands in their modules)."""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from typing import Callable, List, Optional

from caravel_lite.dialect import open_database
from caravel_lite.errors import SchemaNotReady
from caravel_lite.migrator import check_schema, migrate

Command = Callable[[argparse.Namespace], int]


def _migrate(args: argparse.Namespace) -> int:
    db = open_database(args.database)
    with db.connection_context():
        applied = migrate(db)
    print(json.dumps({"applied": applied}))
    return 0


def _check(args: argparse.Namespace) -> int:
    db = open_database(args.database)
    try:
        with db.connection_context():
            check_schema(db)
    except SchemaNotReady as exc:
        print(f"caravel_lite: {exc}", file=sys.stderr)
        print(json.dumps({"pending_migrations": True, "pending": list(exc.pending)}))
        return 1
    print(json.dumps({"pending_migrations": False}))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m caravel_lite",
                                     description="caravel_lite administration")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, handler, text in (("migrate", _migrate, "apply pending schema migrations"),
                                ("check", _check, "fail unless the schema is fully migrated")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--database", required=True,
                         help="database URL, e.g. sqlite:///queue.db or postgresql://u@h/db")
        cmd.set_defaults(run=handler)
    for register in _extensions():
        register(sub)
    return parser


def _extensions() -> List[Callable[[argparse._SubParsersAction], None]]:
    """Sub-commands contributed by the worker and relay modules."""
    found = []
    for module_name in ("caravel_lite.worker_cli", "caravel_lite.relay_cli"):
        if importlib.util.find_spec(module_name) is not None:
            found.append(importlib.import_module(module_name).register)
    return found


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)
