"""QueueOptions: the limits a queue runs with, validated when they are built."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Optional, Tuple, Union

from caravel_lite import limits
from caravel_lite.errors import InvalidField
from caravel_lite.tracing import CHILD, TRACE_RELATIONS
from caravel_lite.validation import check_int

MIB = 1024 * 1024


def _require_duration(name: str, value: object) -> timedelta:
    if not isinstance(value, timedelta):
        raise InvalidField(name, f"must be a datetime.timedelta, got {type(value).__name__}")
    return value


def _require_between(name: str, value: timedelta, low: timedelta, high: timedelta) -> None:
    if not low <= value <= high:
        raise InvalidField(name, f"must be between {low} and {high}, got {value}")


@dataclass(frozen=True)
class QueueOptions:
    """Queue limits. Every field is checked at construction and a bad one raises
    ``InvalidField`` (a ``ValueError``) naming it.

    - ``lease_duration``: 1 s .. 1 h, default 5 min.
    - ``lease_renewal_interval``: None (no renewal) or 100 ms .. lease_duration / 2.
    - ``max_lease_lifetime``: lease_duration .. 7 days, default 1 h; bounds renewals
      from the claim's start.
    - ``max_attempts``: 1 .. 100, default 3; frozen on each job at enqueue.
    - ``retry_delay``: at least 1 ms, default 5 s; doubled per attempt.
    - ``max_retry_delay``: retry_delay .. 1 day, default 5 min.
    - ``max_payload_bytes``: 1 .. 1 MiB of UTF-8, default 64 KiB.
    - ``max_result_bytes``: 1 .. 1 MiB of UTF-8, default 64 KiB: the largest return
      value a job that keeps its result may store (a larger one fails the attempt
      with ``INVALID_RESULT``).
    - ``trace_relation``: how a worker's span relates to the span that enqueued the
      job (``caravel_lite.tracing``): ``"child"`` (default: the first run is its
      child, retries and replays link to it), ``"link"`` or ``"none"``.
    - ``describe_failure``: None (default), or a callable given a handler's exception
      that returns a short text it judges safe to store (or None); kept in the
      failure history, at most 1 KiB of UTF-8. Without it no text is stored, only the
      exception's type and where it was raised.
    - ``record_errors``: False (default) or True: store, per failed attempt, the
      exception's message (at most 1 KiB of UTF-8) and a short traceback (file, line
      and function of each frame, never a local variable), shown by the operator
      views and the failure log line. Only for applications whose messages carry no
      secrets or personal data (see ``redact``).
    - ``redact``: None, or a callable given the message that returns the text to store
      (or None to store none); used only with ``record_errors``.
    - ``fair_tenants``, ``concurrency_limit`` (1 .. 1000), ``rate_limit`` ((N, period),
      N 1 .. 1000, period 1 ms .. 1 day): flow control, see :mod:`caravel_lite.limits`.
      Set them alike wherever the queue is opened (enqueue and workers).
    """

    max_attempts: int = 3
    max_payload_bytes: int = 64 * 1024
    lease_duration: timedelta = timedelta(minutes=5)
    lease_renewal_interval: Optional[timedelta] = None
    max_lease_lifetime: timedelta = timedelta(hours=1)
    retry_delay: timedelta = timedelta(seconds=5)
    max_retry_delay: timedelta = timedelta(minutes=5)
    describe_failure: Optional[Callable[[BaseException], Optional[str]]] = None
    max_result_bytes: int = 64 * 1024
    record_errors: bool = False
    redact: Optional[Callable[[str], Optional[str]]] = None
    fair_tenants: bool = False
    concurrency_limit: Optional[int] = None
    rate_limit: Union[None, Tuple[int, timedelta], "limits.RateLimit"] = None
    trace_relation: str = CHILD

    def __post_init__(self) -> None:
        limits.check_options(self)
        check_int("max_attempts", self.max_attempts, 1, 100)
        check_int("max_payload_bytes", self.max_payload_bytes, 1, MIB)
        check_int("max_result_bytes", self.max_result_bytes, 1, MIB)
        lease = _require_duration("lease_duration", self.lease_duration)
        _require_between("lease_duration", lease, timedelta(seconds=1), timedelta(hours=1))
        if self.lease_renewal_interval is not None:
            renewal = _require_duration("lease_renewal_interval", self.lease_renewal_interval)
            _require_between("lease_renewal_interval", renewal,
                             timedelta(milliseconds=100), lease / 2)
        lifetime = _require_duration("max_lease_lifetime", self.max_lease_lifetime)
        _require_between("max_lease_lifetime", lifetime, lease, timedelta(days=7))
        retry = _require_duration("retry_delay", self.retry_delay)
        if retry < timedelta(milliseconds=1):
            raise InvalidField("retry_delay", f"must be at least 1 ms, got {retry}")
        cap = _require_duration("max_retry_delay", self.max_retry_delay)
        _require_between("max_retry_delay", cap, retry, timedelta(days=1))
        if self.describe_failure is not None and not callable(self.describe_failure):
            raise InvalidField("describe_failure", "must be a callable taking the exception "
                               "and returning a str or None")
        if not isinstance(self.record_errors, bool):
            raise InvalidField("record_errors", "must be True or False")
        if self.redact is not None and not callable(self.redact):
            raise InvalidField("redact", "must be a callable taking the message and "
                               "returning a str or None")
        if self.trace_relation not in TRACE_RELATIONS:
            raise InvalidField("trace_relation", "must be 'child', 'link' or 'none', got "
                               f"{self.trace_relation!r}")


def resolve_options(value: object) -> QueueOptions:
    """The given options, or the defaults for None; anything else is an error."""
    if value is None:
        return QueueOptions()
    if not isinstance(value, QueueOptions):
        raise InvalidField("options", "must be a caravel_lite.QueueOptions")
    return value
