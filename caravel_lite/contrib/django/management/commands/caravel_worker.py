"""``manage.py caravel_worker [--backend ALIAS] [OPTIONS]``: run caravel_lite's worker
on a Caravel backend's queues (default: the ``default`` backend, every queue of its
``QUEUES``) until SIGTERM or SIGINT.

OPTIONS are those of ``caravel-lite worker`` (``--queue``, ``--concurrency``,
``--prefetch``, ``--shutdown-timeout``, ``--max-outage``, ``--poll-interval``,
``--prune-after``, ``--log-level``...), with its exit codes; the database, the lease and
the attempts come from the backend's settings."""
from __future__ import annotations

import sys
from typing import Any, List, NoReturn

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from caravel_lite.contrib.django import overlap
from caravel_lite.contrib.django.compat import task_backends

# Django's own options, which manage.py has already acted on: those with a value, and
# the flags.
_DJANGO_FLAGS = ("--settings", "--pythonpath", "--verbosity", "-v")
_DJANGO_SWITCHES = ("--skip-checks", "--traceback", "--no-color", "--force-color")


def worker_argv(argv: List[str]) -> List[str]:
    """``caravel-lite worker`` arguments for ``manage.py caravel_worker`` arguments."""
    rest: List[str] = []
    alias = "default"
    skip = False
    for index, value in enumerate(argv):
        if skip:
            skip = False
            continue
        name = value.split("=", 1)[0]
        if name in _DJANGO_FLAGS + ("--backend",):
            given = value.split("=", 1)[1] if "=" in value else (
                argv[index + 1] if index + 1 < len(argv) else "")
            skip = "=" not in value
            if name == "--backend":
                alias = given
            continue
        if name in _DJANGO_SWITCHES or (value == "--" and not rest):
            continue  # "--" before the worker's options, as the help says
        rest.append(value)
    try:
        backend = task_backends[alias]
    except ImproperlyConfigured:  # InvalidTaskBackend: no such alias
        raise CommandError(f"TASKS has no backend {alias!r}") from None
    from caravel_lite.contrib.django.backend import CaravelBackend

    # By type: hasattr(backend, "tasks") would build its registry (importing the task
    # modules) only to answer.
    if not isinstance(backend, CaravelBackend):
        raise CommandError(f"TASKS[{alias!r}] is not a CaravelBackend")
    named = _queues_named(rest)
    if not named:
        if not backend.queues:
            raise CommandError(f"TASKS[{alias!r}] lists no QUEUES: name them with --queue")
        for name in sorted(backend.queues):
            rest += ["--queue", name]
    elif backend.queues and set(named) - set(backend.queues):
        raise CommandError(f"TASKS[{alias!r}] does not list queue(s) "
                           f"{', '.join(sorted(set(named) - set(backend.queues)))} in QUEUES")
    # Refused even under --skip-checks: this worker would fail the other's jobs.
    clashes = overlap.overlaps_of(alias, named or None)
    if clashes:
        raise CommandError(clashes[0].message())
    return ["worker", f"caravel_lite.contrib.django.worker:backends.{alias}", *rest]


def _queues_named(argv: List[str]) -> List[str]:
    """The values of the ``--queue`` options (``--queue Q`` and ``--queue=Q``)."""
    named: List[str] = []
    for index, value in enumerate(argv):
        if value == "--queue" and index + 1 < len(argv):
            named.append(argv[index + 1])
        elif value.startswith("--queue="):
            named.append(value.split("=", 1)[1])
    return named


class Command(BaseCommand):  # type: ignore[misc]
    help = __doc__

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", metavar="ALIAS")
        parser.add_argument("worker_options", nargs="*",
                            help="options of caravel-lite worker, after --")

    def run_from_argv(self, argv: List[str]) -> NoReturn:
        # caravel-lite's own parser reads the options, so that they are exactly its.
        from caravel_lite.cli import main

        if {"-h", "--help"} & set(argv[2:]):
            self.stdout.write(__doc__ + "\nThe options of caravel-lite worker (its MODULE:ATTR "
                              "is the backend's queue, given here):\n")
            sys.exit(main(["worker", "--help"], prog="manage.py caravel_worker"))
        try:
            arguments = worker_argv(argv[2:])
        except CommandError as exc:
            self.stderr.write(f"manage.py caravel_worker: {exc}")
            sys.exit(2)
        sys.exit(main(arguments, prog="manage.py caravel_worker"))

    def handle(self, *args: Any, **options: Any) -> None:  # call_command()
        from caravel_lite.cli import main

        argv = ["--backend", options["backend"], *options["worker_options"]]
        code = main(worker_argv(argv), prog="manage.py caravel_worker")
        if code:
            raise CommandError(f"the worker ended with exit code {code}", returncode=code)
