"""Input rules shared by enqueue, the outbox and the registry. Each check raises
``InvalidField`` naming the field, before any SQL runs."""
from __future__ import annotations

import re
import uuid
from datetime import datetime, timedelta
from typing import Any, Callable, Optional

import peewee

from caravel_lite.errors import InvalidField
from caravel_lite.values import Dispatch, Priority

_NAME = re.compile(r"[a-z0-9._-]+\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Control characters or lone surrogates, found in one pass (this runs on every enqueue).
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

_NO_OVERRIDES = (None, None, None, None, None)
_NO_WORKFLOW = (None, None, None)
# unique_for and debounce: from a millisecond (the stored resolution) to a year.
_MIN_PERIOD = timedelta(milliseconds=1)
_MAX_PERIOD = timedelta(days=366)
QUEUE_MAX = 64
WIRE_NAME_MAX = 128
IDENTITY_MAX = 128


def check_name(field: str, value: object, max_length: int) -> str:
    if not isinstance(value, str):
        raise InvalidField(field, f"must be a str, got {type(value).__name__}")
    if not 1 <= len(value) <= max_length:
        raise InvalidField(field, f"must be 1-{max_length} characters, got {len(value)}")
    if not _NAME.match(value):
        raise InvalidField(field, "may only use lowercase letters, digits, '.', '_' and '-'")
    return value


def check_queue(value: object, field: str = "queue") -> str:
    return check_name(field, value, QUEUE_MAX)


def check_wire_name(value: object, field: str = "wire_name") -> str:
    return check_name(field, value, WIRE_NAME_MAX)


def check_identity(field: str, value: object) -> str:
    """Tenant ids and idempotency keys: not blank, at most 128 characters, no control
    characters. Compared exactly (case and surrounding spaces are significant)."""
    if not isinstance(value, str):
        raise InvalidField(field, f"must be a str, got {type(value).__name__}")
    if not value.strip():
        raise InvalidField(field, "must not be blank")
    if len(value) > IDENTITY_MAX:
        raise InvalidField(field, f"must be at most {IDENTITY_MAX} characters, got {len(value)}")
    if _FORBIDDEN.search(value) is not None:
        if _CONTROL.search(value):
            raise InvalidField(field, "must not contain control characters")
        raise InvalidField(field, "must not contain unpaired surrogates")
    return value


def check_not_before(value: object) -> Optional[datetime]:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidField("not_before", f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidField("not_before", "must be timezone-aware (naive datetimes are ambiguous)")
    return value


def check_priority(value: object) -> Priority:
    if isinstance(value, Priority):
        return value
    raise InvalidField("priority", f"must be a caravel_lite.Priority, got {value!r}")


# The Dispatch object most recently found valid. Dispatch is frozen, so the same
# object is still valid when it comes back (callers usually reuse one per queue); the
# reference held here keeps its identity from being reused by another object.
_last_valid: Optional[Dispatch] = None


def check_dispatch(dispatch: object) -> Dispatch:
    """Validate every field of a Dispatch; returns it unchanged."""
    global _last_valid
    if dispatch is _last_valid:
        return dispatch  # type: ignore[return-value]
    if not isinstance(dispatch, Dispatch):
        raise InvalidField("dispatch", f"must be a caravel_lite.Dispatch, got {type(dispatch).__name__}")
    if dispatch.queue is not None:  # else the job type's (prepare_envelope)
        check_queue(dispatch.queue)
    check_identity("tenant_id", dispatch.tenant_id)
    if dispatch.idempotency_key is not None:
        check_identity("idempotency_key", dispatch.idempotency_key)
    if dispatch.concurrency_key is not None:
        check_identity("concurrency_key", dispatch.concurrency_key)
    check_not_before(dispatch.not_before)
    if dispatch.priority is not None:
        check_priority(dispatch.priority)
    if (dispatch.max_attempts, dispatch.retry_delay, dispatch.max_retry_delay,
            dispatch.timeout, dispatch.keep_result) != _NO_OVERRIDES:
        from caravel_lite.job_options import check_overrides  # imports this module
        check_overrides(dispatch)
    if (dispatch.unique_for, dispatch.debounce, dispatch.debounce_key) != _NO_WORKFLOW:
        check_timing(dispatch)
    if type(dispatch) is Dispatch:  # a subclass could be mutable
        _last_valid = dispatch
    return dispatch


def _period(field: str, value: object) -> timedelta:
    if not isinstance(value, timedelta):
        raise InvalidField(field, f"must be a datetime.timedelta, got {type(value).__name__}")
    if not _MIN_PERIOD <= value <= _MAX_PERIOD:
        raise InvalidField(field, f"must be between {_MIN_PERIOD} and {_MAX_PERIOD}, "
                           f"got {value}")
    return value


def check_timing(dispatch: Dispatch) -> None:
    """``unique_for`` (only with an idempotency key) and ``debounce`` (with its
    ``debounce_key``, never with an idempotency key or a ``not_before``: a debounced
    job's key and due time are the debounce's)."""
    if dispatch.unique_for is not None:
        _period("unique_for", dispatch.unique_for)
        if dispatch.idempotency_key is None:
            raise InvalidField("unique_for", "requires an idempotency_key (it bounds "
                               "how long that key deduplicates)")
    if dispatch.debounce is None and dispatch.debounce_key is None:
        return
    if dispatch.debounce is None:
        raise InvalidField("debounce", "required with debounce_key")
    _period("debounce", dispatch.debounce)
    if dispatch.debounce_key is None:
        raise InvalidField("debounce_key", "required with debounce")
    check_identity("debounce_key", dispatch.debounce_key)
    if dispatch.idempotency_key is not None:
        raise InvalidField("debounce", "cannot be combined with idempotency_key (the "
                           "debounce key decides which job an enqueue replaces)")
    if dispatch.not_before is not None:
        raise InvalidField("debounce", "cannot be combined with not_before (a debounced "
                           "job is due once the calls stop for the window)")


def check_int(field: str, value: object, low: int, high: int) -> int:
    """An int (not a bool) within [low, high]."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidField(field, f"must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidField(field, f"must be between {low} and {high}, got {value}")
    return value


def check_uuid(field: str, value: object) -> str:
    """A UUID (or its text) in the canonical text form stored in id columns."""
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise InvalidField(field, "must be a UUID")


def check_database(field: str, value: object) -> peewee.Database:
    if not isinstance(value, peewee.Database):
        raise InvalidField(field, "must be a peewee.Database")
    return value


def check_clock(value: object) -> Callable[[], Any]:
    if not callable(value):
        raise InvalidField("clock", "must be a callable returning an aware datetime")
    return value
