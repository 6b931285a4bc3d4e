"""The adapter between what caravel_lite records about a job and Django's
``TaskResult``: the one module that knows which of caravel_lite's result and worker
APIs exist in the installed version.

It expects, where available:

- ``JobRegistry.register(..., keep_result=True)``: the handler's return value is kept
  on completion (caravel_lite's kept results);
- ``DatabaseQueue.result(job_id, queue_name, tenant_id) -> Optional[JobResult]`` with
  ``state`` and ``value`` (the kept return value of a completed job);
- ``JobDetail.worker_id`` (``QueueAdmin.job``): the worker holding the job's current
  lease.

Without kept results a SUCCESSFUL task's ``return_value`` is None (logged once at
WARNING). caravel_lite records no worker per past attempt, so ``worker_ids`` holds one
entry per attempt (Django's ``attempts`` is its length): the worker id where
caravel_lite records it, :data:`UNRECORDED` otherwise.

Errors come from the job's failure history (at most its last 20 failed attempts): the
exception's class path and, in place of a traceback (caravel_lite never stores an
exception's message or frames unless told to), the site it was raised at. A failure
that raised nothing (a lease that expired when a worker died, a job of an unknown
type) is a :class:`RecordedFailure` naming its category, so that a FAILED task always
says why.
"""
from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, List, Optional, Tuple

from caravel_lite.admin.values import JobDetail
from caravel_lite.registry import JobRegistry
from caravel_lite.values import JobState

__all__ = ["KEEPS_RESULTS", "UNRECORDED", "Recorded", "RecordedFailure", "register", "read",
           "error_path"]

log = logging.getLogger("caravel_lite.contrib.django")

KEEPS_RESULTS = "keep_result" in inspect.signature(JobRegistry.register).parameters
UNRECORDED = "unrecorded"
_warned: List[bool] = []


def register(jobs: JobRegistry, wire_name: str, job_type: type,
             handler: Callable[..., Any]) -> None:
    """Register a task's job type, keeping its return value where caravel_lite can."""
    if KEEPS_RESULTS:
        jobs.register(wire_name, job_type, handler, keep_result=True)  # type: ignore[call-arg,unused-ignore]
    else:
        jobs.register(wire_name, job_type, handler)


@dataclass(frozen=True)
class Recorded:
    """What caravel_lite has recorded about one job, as a TaskResult needs it."""

    detail: JobDetail
    return_value: Any
    worker_ids: Tuple[str, ...]
    errors: Tuple[Tuple[str, str], ...]  # (exception class path, "traceback" text)

    @property
    def started_at(self) -> Optional[datetime]:
        return self.detail.claimed_at


class RecordedFailure(Exception):
    """A failed attempt for which caravel_lite recorded a category but no exception (a
    lease that expired, a payload it could not decode, an unknown job type)."""


_RECORDED = f"{__name__}.RecordedFailure"


def error_path(error_type: str) -> str:
    """Django's exception class path: caravel_lite names builtins bare (``ValueError``)."""
    return error_type if "." in error_type else f"builtins.{error_type}"


def read(queue: Any, admin: Any, job_id: str) -> Optional[Recorded]:
    """The job ``job_id`` of any tenant (the caller checks the tenant), or None."""
    detail = admin.job(job_id, include_payload=True)
    if detail is None:
        return None
    value = None
    if detail.state is JobState.COMPLETED:
        result = getattr(queue, "result", None)
        if result is not None:
            kept = result(detail.job_id, detail.queue_name, detail.tenant_id)
            value = None if kept is None else kept.value
        elif not _warned:
            _warned.append(True)
            log.warning("this caravel_lite keeps no return values: a SUCCESSFUL task's "
                        "return_value reads None")
    holder = getattr(detail, "worker_id", None)
    attempts = max(int(detail.attempts), 0)
    workers = [UNRECORDED] * attempts
    if holder and attempts and detail.state is JobState.LEASED:
        workers[-1] = str(holder)
    errors = [(error_path(f.error_type), f"raised at {f.site or 'an unknown site'}")
              if f.error_type else (_RECORDED, f"{f.category.value}: no exception recorded")
              for f in detail.failures]
    last = detail.failures[-1].category if detail.failures else None
    if detail.last_failure is not None and detail.last_failure is not last:
        # Expired leases are swept without a history row.
        errors.append((_RECORDED, f"{detail.last_failure.value}: no exception recorded"))
    return Recorded(detail, value, tuple(workers), tuple(errors))
