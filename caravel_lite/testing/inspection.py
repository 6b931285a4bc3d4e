"""enqueued() and assert_enqueued(): what a test's code put in the queue, decoded.

These read the jobs table directly (tests may look at payloads; the operator and
application APIs never return them) and change nothing.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, List, Optional, Union

from caravel_lite import codec, validation
from caravel_lite.clock import from_ms
from caravel_lite.errors import InvalidField
from caravel_lite.queue import DatabaseQueue
from caravel_lite.schema import bind_models
from caravel_lite.values import Dispatch, Failure, JobState, Priority

__all__ = ["EnqueuedJob", "enqueued", "assert_enqueued", "assert_not_enqueued"]

# How many jobs an assertion message lists before it says "... and N more".
SHOWN = 20


@dataclass(frozen=True)
class EnqueuedJob:
    """One stored job as a test sees it.

    ``job`` is the payload decoded to its registered type, or None when the queue's
    registry does not know ``wire_name`` or the payload does not decode (``payload``
    holds the stored text either way). ``dispatch`` is how it was enqueued, with
    ``not_before`` set to its current due time.
    """

    job_id: uuid.UUID
    job: Any
    wire_name: str
    dispatch: Dispatch
    state: JobState
    attempts: int
    max_attempts: int
    last_failure: Optional[Failure]
    payload: str = field(repr=False)

    def describe(self) -> str:
        """One line for assertion messages."""
        shown = repr(self.job) if self.job is not None else f"<undecodable {self.wire_name}>"
        d = self.dispatch
        due = d.not_before.isoformat() if d.not_before is not None else "?"
        failure = f" last_failure={self.last_failure.value}" if self.last_failure else ""
        return (f"{shown} [{self.wire_name}] tenant={d.tenant_id!r} "
                f"key={d.idempotency_key!r} due={due} priority={d.priority.name if d.priority else '-'} "
                f"state={self.state.value} attempts={self.attempts}/{self.max_attempts}"
                f"{failure} id={self.job_id}")


StateFilter = Optional[JobState]


def enqueued(queue: DatabaseQueue, queue_name: str, job_type: Optional[type] = None,
             tenant_id: Optional[str] = None,
             state: StateFilter = JobState.PENDING) -> List[EnqueuedJob]:
    """The jobs of ``queue_name`` in ``state`` (None: any state), of ``job_type`` and
    ``tenant_id`` when given, decoded, in the order a claim would take them (priority,
    due time, enqueue time, id)."""
    if not isinstance(queue, DatabaseQueue):
        raise InvalidField("queue", "must be a caravel_lite.DatabaseQueue")
    validation.check_queue(queue_name, "queue_name")
    if state is not None and not isinstance(state, JobState):
        raise InvalidField("state", "must be a caravel_lite.JobState or None")
    # The runtime model is built at run time: its columns are not known statically.
    jobs: Any = bind_models(queue.db)[0]
    where = jobs.queue == queue_name
    if job_type is not None:
        where &= jobs.wire_name == queue.registry.for_type(job_type).wire_name
    if tenant_id is not None:
        validation.check_identity("tenant_id", tenant_id)
        where &= jobs.tenant_id == tenant_id
    if state is not None:
        where &= jobs.state == state.value
    rows = (jobs.select().where(where)
            .order_by(jobs.priority, jobs.available_at, jobs.enqueued_at, jobs.id))
    found = [_decoded(queue, row) for row in rows]
    # The columns compare exactly on every database; checked again as admin.py does.
    return [job for job in found if job.dispatch.queue == queue_name
            and (tenant_id is None or job.dispatch.tenant_id == tenant_id)]


def _decoded(queue: DatabaseQueue, row: Any) -> EnqueuedJob:
    definition = queue.registry.for_name(row.wire_name)
    job = None
    if definition is not None:
        try:
            job = codec.decode(definition.job_type, row.payload)
        except codec.PayloadDecodeError:
            job = None
    try:
        failure = Failure(row.last_failure) if row.last_failure else None
    except ValueError:  # a category this version does not know
        failure = None
    dispatch = Dispatch(queue=row.queue, tenant_id=row.tenant_id,
                        idempotency_key=row.idempotency_key,
                        not_before=from_ms(row.available_at), priority=Priority(row.priority))
    return EnqueuedJob(uuid.UUID(row.id), job, row.wire_name, dispatch, JobState(row.state),
                       row.attempts, row.max_attempts, failure, row.payload)


Expected = Union[None, type, object]


def _matches(found: EnqueuedJob, expected: Expected,
             idempotency_key: Optional[str]) -> bool:
    if idempotency_key is not None and found.dispatch.idempotency_key != idempotency_key:
        return False
    if expected is None or isinstance(expected, type):
        return True  # the type was filtered in the query
    return bool(found.job == expected)


def _select(queue: DatabaseQueue, queue_name: str, expected: Expected,
            tenant_id: Optional[str], state: StateFilter,
            idempotency_key: Optional[str]) -> List[EnqueuedJob]:
    job_type = expected if isinstance(expected, type) else (
        type(expected) if expected is not None else None)
    candidates = enqueued(queue, queue_name, job_type, tenant_id, state)
    return [job for job in candidates if _matches(job, expected, idempotency_key)]


def _what(queue_name: str, expected: Expected, tenant_id: Optional[str],
          state: StateFilter, idempotency_key: Optional[str]) -> str:
    if expected is None:
        shown = "any job"
    elif isinstance(expected, type):
        shown = f"a {expected.__name__}"
    else:
        shown = repr(expected)
    parts = [f"tenant {tenant_id!r}" if tenant_id is not None else "any tenant",
             f"state {state.value}" if state is not None else "any state"]
    if idempotency_key is not None:
        parts.append(f"key {idempotency_key!r}")
    return f"{shown} on queue {queue_name!r} ({', '.join(parts)})"


def _listing(title: str, jobs: List[EnqueuedJob]) -> str:
    if not jobs:
        return f"{title}: none"
    lines = [f"{title} ({len(jobs)}):"]
    lines += [f"  - {job.describe()}" for job in jobs[:SHOWN]]
    if len(jobs) > SHOWN:
        lines.append(f"  ... and {len(jobs) - SHOWN} more")
    return "\n".join(lines)


def assert_enqueued(queue: DatabaseQueue, queue_name: str, job: Expected = None, *,
                    tenant_id: Optional[str] = None, state: StateFilter = JobState.PENDING,
                    idempotency_key: Optional[str] = None,
                    count: Optional[int] = None) -> List[EnqueuedJob]:
    """Assert that ``queue_name`` holds a job matching ``job`` (None: any job; a job
    type: any job of that type; a job instance: one equal to it) with the given
    tenant, state (None: any) and key; with ``count``, exactly that many. Returns the
    matches. The AssertionError lists what the queue holds in that state instead."""
    if count is not None:
        validation.check_int("count", count, 0, 1_000_000)
    matches = _select(queue, queue_name, job, tenant_id, state, idempotency_key)
    if (count is None and matches) or (count is not None and len(matches) == count):
        return matches
    wanted = "exactly %d of " % count if count is not None else ""
    there = enqueued(queue, queue_name, state=state)
    scope = f"state {state.value}" if state is not None else "any state"
    message = (f"expected {wanted}{_what(queue_name, job, tenant_id, state, idempotency_key)}"
               f", found {len(matches)}.\n"
               + _listing(f"jobs on queue {queue_name!r} in {scope}", there))
    raise AssertionError(message)


def assert_not_enqueued(queue: DatabaseQueue, queue_name: str, job: Expected = None, *,
                        tenant_id: Optional[str] = None,
                        state: StateFilter = JobState.PENDING,
                        idempotency_key: Optional[str] = None) -> None:
    """Assert that ``queue_name`` holds no job matching ``job`` (as in
    :func:`assert_enqueued`); the AssertionError lists the ones it found."""
    matches = _select(queue, queue_name, job, tenant_id, state, idempotency_key)
    if matches:
        raise AssertionError(
            f"expected nothing matching "
            f"{_what(queue_name, job, tenant_id, state, idempotency_key)}"
            f".\n" + _listing("found", matches))
