"""``manage.py caravel_migrate [--backend ALIAS]``: apply caravel_lite's pending
migrations to the database of every Caravel backend in ``TASKS`` (or of one)."""
from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from caravel_lite.contrib.django.schema import caravel_backends, migrate_backend


class Command(BaseCommand):  # type: ignore[misc]
    help = "Apply caravel_lite's pending migrations to the Caravel backends' databases."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default=None, metavar="ALIAS",
                            help="only this TASKS backend (default: every Caravel backend)")

    def handle(self, *args: Any, **options: Any) -> None:
        backends = [b for b in caravel_backends()
                    if options["backend"] in (None, b.alias)]
        if not backends:
            raise CommandError(f"no Caravel backend {options['backend']!r} in TASKS"
                               if options["backend"] else "no Caravel backend in TASKS")
        for backend in backends:
            applied = migrate_backend(backend)
            self.stdout.write(f"{backend.alias}: " + (", ".join(applied) if applied
                                                     else "up to date"))
