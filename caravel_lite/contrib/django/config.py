"""The backend's settings: ``TASKS[alias]["OPTIONS"]``, read and checked once, when
Django creates the backend. A wrong value is ``ImproperlyConfigured`` naming the
option; nothing is opened or imported here."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping, Optional, Sequence, Tuple

from django.core.exceptions import ImproperlyConfigured

from caravel_lite import validation
from caravel_lite.errors import InvalidField
from caravel_lite.options import QueueOptions

__all__ = ["BackendConfig", "KNOWN_OPTIONS"]

KNOWN_OPTIONS = ("DATABASE", "DATABASE_URL", "TENANT", "TASK_MODULES", "MAX_ATTEMPTS",
                 "LEASE_SECONDS")


@dataclass(frozen=True)
class BackendConfig:
    """What one ``TASKS`` entry asks of caravel_lite.

    - ``database``: the Django database alias holding the queue (``OPTIONS["DATABASE"]``,
      default ``"default"``): ``enqueue()`` then writes through Django's own connection
      and joins the caller's ``transaction.atomic()``.
    - ``database_url``: a caravel_lite URL of another database (``OPTIONS["DATABASE_URL"]``,
      e.g. ``postgresql://...``) instead: ``enqueue()`` commits on its own, so a caller
      that needs it after its own commit uses ``transaction.on_commit``.
    - ``tenant_id``: the tenant every job of this backend is stored under (default
      ``"default"``; Django's tasks have no tenants).
    - ``task_modules``: the modules whose ``@task`` functions may run
      (``OPTIONS["TASK_MODULES"]``); None: ``<app>.tasks`` of every installed app.
    - ``queue_options``: caravel_lite's ``QueueOptions`` (``MAX_ATTEMPTS``, default 3:
      a failed attempt is retried with back-off; ``LEASE_SECONDS``, default 300).
    """

    database: Optional[str]
    database_url: Optional[str]
    tenant_id: str
    task_modules: Optional[Tuple[str, ...]]
    queue_options: QueueOptions

    @classmethod
    def read(cls, alias: str, options: Mapping[str, Any],
             queues: Sequence[str]) -> "BackendConfig":
        unknown = sorted(set(options) - set(KNOWN_OPTIONS))
        if unknown:
            raise _improper(alias, unknown[0], f"is not an option of CaravelBackend "
                            f"(known: {', '.join(KNOWN_OPTIONS)})")
        url = options.get("DATABASE_URL")
        database = options.get("DATABASE")
        if url is not None and database is not None:
            raise _improper(alias, "DATABASE_URL", "contradicts DATABASE: give one of them")
        if url is not None and not (isinstance(url, str) and "://" in url):
            raise _improper(alias, "DATABASE_URL", "must be a URL such as postgresql://...")
        if url is None:
            database = "default" if database is None else database
            if not isinstance(database, str) or not database:
                raise _improper(alias, "DATABASE", "must name an entry of DATABASES")
        tenant = options.get("TENANT", "default")
        modules = options.get("TASK_MODULES")
        if modules is not None and (isinstance(modules, str) or not all(
                isinstance(name, str) and name for name in modules)):
            raise _improper(alias, "TASK_MODULES", "must be a list of module names")
        try:
            validation.check_identity("TENANT", tenant)
            for name in queues:
                validation.check_queue(name, "QUEUES")
            queue_options = _queue_options(options)
        except InvalidField as exc:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]: {exc}") from None
        return cls(database, url, tenant, None if modules is None else tuple(modules),
                   queue_options)


def _queue_options(options: Mapping[str, Any]) -> QueueOptions:
    values: dict[str, Any] = {}
    if "MAX_ATTEMPTS" in options:
        values["max_attempts"] = options["MAX_ATTEMPTS"]
    if "LEASE_SECONDS" in options:
        seconds = options["LEASE_SECONDS"]
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise InvalidField("LEASE_SECONDS", "must be a number of seconds")
        values["lease_duration"] = timedelta(seconds=seconds)
        values["max_lease_lifetime"] = max(timedelta(hours=1), values["lease_duration"])
    return QueueOptions(**values)


def _improper(alias: str, option: str, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"TASKS[{alias!r}]: {option} {message}")
