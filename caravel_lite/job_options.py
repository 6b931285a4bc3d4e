"""Options per job type, overridable per call, and what of them is stored with a job.

Order of precedence, field by field: a value given on the :class:`Dispatch` overrides
the job type's (``registry.job(..., retry_delay=...)``), which overrides the queue's
:class:`QueueOptions`. Everything decided at enqueue is stored with the job: ``queue``,
``priority`` and ``max_attempts`` in their own columns, and ``retry_delay``,
``max_retry_delay``, ``timeout`` and ``keep_result``, when the type or the call set
one, in the job's ``job_options`` column (a short canonical JSON object). A job that
sets none of them stores NULL there and runs with the worker's ``QueueOptions``, as
every job written before migration 0008 does. So a deploy that changes a type's
options never changes the jobs already enqueued.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Dict, Optional

from caravel_lite import validation
from caravel_lite.clock import duration_micros
from caravel_lite.errors import InvalidField
from caravel_lite.values import Priority

__all__ = ["TypeOptions", "RunOptions", "type_options", "check_overrides", "stored_options",
           "parse_stored", "MAX_TIMEOUT"]

# The longest timeout accepted (as max_lease_lifetime's bound): far longer is almost
# surely a unit mistake.
MAX_TIMEOUT = timedelta(days=7)
_MIN_DELAY = timedelta(milliseconds=1)
_MAX_DELAY = timedelta(days=1)


@dataclass(frozen=True)
class TypeOptions:
    """What a job type sets for its jobs (None: not set, the queue's applies)."""

    queue: Optional[str] = None
    priority: Optional[Priority] = None
    max_attempts: Optional[int] = None
    retry_delay: Optional[timedelta] = None
    max_retry_delay: Optional[timedelta] = None
    timeout: Optional[timedelta] = None
    keep_result: bool = False


NO_OPTIONS = TypeOptions()


@dataclass(frozen=True)
class RunOptions:
    """What a claimed job carries of its stored options (None: the queue's applies)."""

    retry_delay_us: Optional[int] = None
    max_retry_delay_us: Optional[int] = None
    timeout: Optional[timedelta] = None
    keep_result: bool = False


def _duration(field: str, value: object, low: timedelta, high: timedelta) -> timedelta:
    if not isinstance(value, timedelta):
        raise InvalidField(field, f"must be a datetime.timedelta, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidField(field, f"must be between {low} and {high}, got {value}")
    return value


def _check_common(max_attempts: object, retry_delay: object, max_retry_delay: object,
                  timeout: object, keep_result: object) -> None:
    """The rules a type and a Dispatch share (QueueOptions' ranges, same field names)."""
    if max_attempts is not None:
        validation.check_int("max_attempts", max_attempts, 1, 100)
    if retry_delay is not None:
        _duration("retry_delay", retry_delay, _MIN_DELAY, _MAX_DELAY)
    if max_retry_delay is not None:
        _duration("max_retry_delay", max_retry_delay, _MIN_DELAY, _MAX_DELAY)
    if (isinstance(retry_delay, timedelta) and isinstance(max_retry_delay, timedelta)
            and max_retry_delay < retry_delay):
        raise InvalidField("max_retry_delay", f"must be at least retry_delay ({retry_delay}), "
                           f"got {max_retry_delay}")
    if timeout is not None:
        _duration("timeout", timeout, _MIN_DELAY, MAX_TIMEOUT)
    if keep_result is not None and not isinstance(keep_result, bool):
        raise InvalidField("keep_result", f"must be a bool, got {type(keep_result).__name__}")


def type_options(*, queue: Optional[str] = None, priority: Optional[Priority] = None,
                 max_attempts: Optional[int] = None, retry_delay: Optional[timedelta] = None,
                 max_retry_delay: Optional[timedelta] = None,
                 timeout: Optional[timedelta] = None, keep_result: bool = False) -> TypeOptions:
    """A job type's options, validated at registration (``InvalidField`` naming the
    field, with QueueOptions' ranges; ``timeout`` 1 ms .. 7 days)."""
    if queue is not None:
        validation.check_queue(queue)
    if priority is not None:
        validation.check_priority(priority)
    if not isinstance(keep_result, bool):
        raise InvalidField("keep_result", f"must be a bool, got {type(keep_result).__name__}")
    _check_common(max_attempts, retry_delay, max_retry_delay, timeout, keep_result)
    if (queue, priority, max_attempts, retry_delay, max_retry_delay, timeout,
            keep_result) == (None, None, None, None, None, None, False):
        return NO_OPTIONS
    return TypeOptions(queue, priority, max_attempts, retry_delay, max_retry_delay, timeout,
                       keep_result)


def check_overrides(dispatch: Any) -> None:
    """Validate a Dispatch's per-call options (the same rules as a type's)."""
    _check_common(dispatch.max_attempts, dispatch.retry_delay, dispatch.max_retry_delay,
                  dispatch.timeout, dispatch.keep_result)


def _pick(call: Any, kind: Any) -> Any:
    return call if call is not None else kind


def stored_options(kind: TypeOptions, dispatch: Any) -> Optional[str]:
    """The ``job_options`` text for a job of a type with ``kind`` enqueued with
    ``dispatch`` (call over type), or None when neither set any of these options."""
    retry = _pick(dispatch.retry_delay, kind.retry_delay)
    cap = _pick(dispatch.max_retry_delay, kind.max_retry_delay)
    timeout = _pick(dispatch.timeout, kind.timeout)
    keep = _pick(dispatch.keep_result, kind.keep_result)
    if retry is None and cap is None and timeout is None and not keep:
        return None
    if isinstance(retry, timedelta) and isinstance(cap, timedelta) and cap < retry:
        # One from the call, one from the type: the pair must still make sense.
        raise InvalidField("max_retry_delay", f"must be at least retry_delay ({retry}), "
                           f"got {cap}")
    data: Dict[str, Any] = {}
    if retry is not None:
        data["retry_delay_us"] = duration_micros(retry)
    if cap is not None:
        data["max_retry_delay_us"] = duration_micros(cap)
    if timeout is not None:
        data["timeout_us"] = duration_micros(timeout)
    if keep:
        data["keep_result"] = True
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _micros(data: Dict[str, Any], key: str) -> Optional[int]:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(key)
    return value


def parse_stored(text: Optional[str]) -> Optional[RunOptions]:
    """The options stored with a job; None for NULL. A text this code cannot read
    (written by hand, or by a later version with other keys) raises ``ValueError``:
    the worker records the attempt as INVALID_PAYLOAD rather than guess."""
    if text is None:
        return None
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("job_options")
    timeout = _micros(data, "timeout_us")
    keep = data.get("keep_result", False)
    if not isinstance(keep, bool):
        raise ValueError("keep_result")
    return RunOptions(_micros(data, "retry_delay_us"), _micros(data, "max_retry_delay_us"),
                      timedelta(microseconds=timeout) if timeout is not None else None, keep)


def of_lease(lease: Any) -> Optional[RunOptions]:
    """The options a claimed job carries (``lease._job_options``), None when it has
    none or they cannot be read (the worker then fails the attempt as INVALID_PAYLOAD
    before its handler runs; a failure's backoff falls back to the queue's)."""
    text = lease._job_options
    if text is None:
        return None
    try:
        return parse_stored(text)
    except (ValueError, TypeError):
        return None


def queue_of(registry: Any, job: Any, dispatch: Any) -> str:
    """The queue a job enqueued with ``dispatch`` went to (the Dispatch's, else its
    type's); only for a job already accepted, so one of them names it."""
    name = dispatch.queue if dispatch.queue is not None else registry.for_job(job).options.queue
    assert name is not None
    return str(name)
