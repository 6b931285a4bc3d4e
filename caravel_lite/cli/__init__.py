"""The command line: ``caravel-lite COMMAND ...`` (the console script) and
``python -m caravel_lite COMMAND ...`` do the same.

Each command is one module of this package with a ``register(subparsers)`` function
that adds its sub-parser and sets ``run`` to a function ``(args) -> int``; the commands
are thin layers over the library API. What they share (database flags and their
environment defaults, ``MODULE:ATTR``, password masking, safe printing, exit codes)
lives in :mod:`caravel_lite.cli.common`.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional, Sequence, TextIO, cast

from caravel_lite.cli import common

# The command modules, in the order ``--help`` lists them. A new command is one module
# in this package and one line here.
COMMANDS: Sequence[str] = (
    "migrate",
    "check",
    "worker",
    "relay",
    "scheduler",
    "schedules",
    "queues",
    "jobs",
    "show",
    "replay",
    "discard",
    "delete",
    "prune",
    "stats",
    "dashboard",
    "cancel",
    "pausing",
    "workers",
    "workflows",
    "metrics",
)

PROG = "caravel-lite"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = common.Parser(
        prog=prog, description="caravel_lite: migrate, check and run workers, relays and schedulers",
        epilog=f"Database URLs default to ${common.DATABASE_ENV} (and "
               f"${common.APP_DATABASE_ENV} for the relay's application database), which "
               f"keeps passwords out of `ps` and shell history. Exit codes: 0 ok, 1 "
               f"fault, 2 bad arguments. --debug (or {common.DEBUG_ENV}=1) shows the "
               f"traceback of a fault.")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of a fault (also "
                             f"{common.DEBUG_ENV}=1)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        importlib.import_module(f"caravel_lite.cli.{name}").register(subparsers)
    for command in subparsers.choices.values():
        # Accepted after the command too; SUPPRESS keeps a --debug given before it.
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                             help="show the traceback of a fault")
    return parser


def main(argv: Optional[List[str]] = None, prog: str = PROG) -> int:
    """Run one command and return its exit code (0 ok, 1 fault, 2 bad arguments).

    While it runs, stdout and stderr mask the passwords of the URLs it was given."""
    argv = sys.argv[1:] if argv is None else list(argv)
    masker = common.Masker()
    streams = sys.stdout, sys.stderr
    sys.stdout = cast(TextIO, common.MaskedStream(streams[0], masker))
    sys.stderr = cast(TextIO, common.MaskedStream(streams[1], masker))
    debug = common.debug_requested(argv)
    # Error lines always start "caravel-lite COMMAND:", however the command was started,
    # so that logs read the same and can be searched for one prefix.
    where = PROG
    try:
        # Arguments may hold URLs before they are parsed (an argparse error quotes them).
        for value in argv:
            if "://" in value:
                masker.add_url(value)
        args = build_parser(prog).parse_args(argv)
        args.masker = masker
        where = f"{PROG} {args.command}"
        debug = debug or args.debug
        common.configure_logging("WARNING")
        return int(args.run(args))
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else common.USAGE
    except BaseException as exc:  # every failure becomes one line and an exit code
        if isinstance(exc, common.UsageError) and exc.prog and exc.prog.startswith(prog + " "):
            where = f"{PROG} {exc.prog[len(prog) + 1:]}"  # argparse found it in a command
        return common.exit_code_of(exc, where, debug, sys.stderr)
    finally:
        common.remove_logging()
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = streams
