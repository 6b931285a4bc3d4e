"""Canonical JSON for job payloads and typed decoding back into the registered type.

The same job always encodes to the same text (sorted keys, no insignificant spaces,
UTC datetimes), which is what makes idempotent enqueue comparable byte for byte.
Decoding is driven only by the registered type's annotations: nothing found in the
database ever names a class to load.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import sys
import types
import typing
import uuid
from typing import Any

from caravel_lite.errors import InvalidField

MAX_DEPTH = 32


class PayloadDecodeError(ValueError):
    """A stored payload does not fit the registered type (recorded as INVALID_PAYLOAD).

    The message names the path inside the payload, never its values."""


def _to_plain(value: Any, depth: int, path: str) -> Any:
    """Turn a supported value into plain JSON data, enforcing the depth limit."""
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str) and any(0xD800 <= ord(c) <= 0xDFFF for c in value):
            raise InvalidField("payload", f"{path}: unpaired surrogate in string")
        return value
    if isinstance(value, enum.Enum):
        return _to_plain(value.value, depth, path)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidField("payload", f"{path}: NaN and infinity are not valid JSON")
        return value
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise InvalidField("payload", f"{path}: a non-finite Decimal cannot be stored")
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidField("payload", f"{path}: naive datetime; use an aware one")
        return value.astimezone(dt.timezone.utc).isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if depth >= MAX_DEPTH:
        raise InvalidField("payload", f"nesting deeper than {MAX_DEPTH} levels")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_plain(getattr(value, f.name), depth + 1, f"{path}.{f.name}")
                for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_to_plain(item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidField("payload", f"{path}: dict keys must be str, got {type(key).__name__}")
            out[key] = _to_plain(item, depth + 1, f"{path}[{key!r}]")
        return out
    raise InvalidField("payload", f"{path}: values of type {type(value).__name__} are not supported")


def encode(job: Any) -> str:
    """The canonical JSON text of a job (a dataclass instance)."""
    if not dataclasses.is_dataclass(job) or isinstance(job, type):
        raise InvalidField("job", f"must be a dataclass instance, got {type(job).__name__}")
    plain = _to_plain(job, 0, "$")
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def _fail(path: str, expected: str) -> PayloadDecodeError:
    return PayloadDecodeError(f"{path}: expected {expected}")


_UNION_TYPES: tuple = (typing.Union,)
if sys.version_info >= (3, 10):
    _UNION_TYPES = (typing.Union, types.UnionType)


_BARE_CONTAINERS = {list: typing.List[Any], dict: typing.Dict[str, Any],
                    tuple: typing.Tuple[Any, ...]}


def _from_plain(tp: Any, data: Any, path: str) -> Any:
    if tp is Any:
        return data
    # A bare container annotation (``tags: list``) means "of anything"; without this
    # such a field was refused at decode time, which made the job impossible to enqueue.
    tp = _BARE_CONTAINERS.get(tp, tp)
    origin = typing.get_origin(tp)
    if origin in _UNION_TYPES:
        for option in typing.get_args(tp):
            try:
                return _from_plain(option, data, path)
            except PayloadDecodeError:
                continue
        raise _fail(path, f"one of {tp}")
    if tp is type(None):
        if data is not None:
            raise _fail(path, "null")
        return None
    if origin in (list, typing.List):
        (item_tp,) = typing.get_args(tp) or (Any,)
        if not isinstance(data, list):
            raise _fail(path, "a list")
        return [_from_plain(item_tp, item, f"{path}[{i}]") for i, item in enumerate(data)]
    if origin in (tuple, typing.Tuple):
        args = typing.get_args(tp)
        if not isinstance(data, list):
            raise _fail(path, "a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_from_plain(args[0], item, f"{path}[{i}]") for i, item in enumerate(data))
        if len(args) != len(data):
            raise _fail(path, f"{len(args)} items")
        return tuple(_from_plain(a, item, f"{path}[{i}]") for i, (a, item) in enumerate(zip(args, data)))
    if origin in (dict, typing.Dict):
        key_tp, value_tp = typing.get_args(tp) or (str, Any)
        if key_tp is not str or not isinstance(data, dict):
            raise _fail(path, "an object with str keys")
        return {k: _from_plain(value_tp, v, f"{path}[{k!r}]") for k, v in data.items()}
    if origin is not None:
        raise _fail(path, f"a supported type (not {tp})")
    if dataclasses.is_dataclass(tp):
        return _decode_dataclass(tp, data, path)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(data)
        except (ValueError, TypeError):
            raise _fail(path, f"a value of {tp.__name__}") from None
    if tp is bool:
        if not isinstance(data, bool):
            raise _fail(path, "a boolean")
        return data
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise _fail(path, "an integer")
        return data
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise _fail(path, "a number")
        return float(data)
    if tp is str:
        if not isinstance(data, str):
            raise _fail(path, "a string")
        return data
    if tp is uuid.UUID:
        try:
            return uuid.UUID(data)
        except (ValueError, TypeError, AttributeError):
            raise _fail(path, "a UUID string") from None
    if tp is decimal.Decimal:
        if not isinstance(data, str):
            raise _fail(path, "a decimal string")
        try:
            value = decimal.Decimal(data)
        except decimal.InvalidOperation:
            raise _fail(path, "a decimal string") from None
        if not value.is_finite():
            raise _fail(path, "a finite decimal")
        return value
    if tp is dt.datetime:
        try:
            value = dt.datetime.fromisoformat(data)
        except (ValueError, TypeError):
            raise _fail(path, "an ISO 8601 datetime") from None
        if value.tzinfo is None:
            raise _fail(path, "an aware datetime")
        return value
    if tp is dt.date:
        try:
            return dt.date.fromisoformat(data)
        except (ValueError, TypeError):
            raise _fail(path, "an ISO 8601 date") from None
    raise _fail(path, f"a supported type (not {tp!r})")


_HINTS: dict = {}


def _hints(cls: type) -> dict:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = typing.get_type_hints(cls)
        _HINTS[cls] = hints
    return hints


def _decode_dataclass(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise _fail(path, f"an object for {cls.__name__}")
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = set(data) - set(fields)
    if unknown:
        raise PayloadDecodeError(f"{path}: {len(unknown)} unexpected field(s) for {cls.__name__}")
    kwargs = {}
    for name, f in fields.items():
        if name in data:
            kwargs[name] = _from_plain(hints.get(name, Any), data[name], f"{path}.{name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise PayloadDecodeError(f"{path}.{name}: missing")
    return cls(**kwargs)


def decode(job_type: type, text: str) -> Any:
    """Decode stored JSON into an instance of ``job_type``; raises PayloadDecodeError."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        raise PayloadDecodeError("$: not valid JSON") from None
    try:
        return _decode_dataclass(job_type, data, "$")
    except PayloadDecodeError:
        raise
    except (TypeError, ValueError, RecursionError):
        # The type's own __post_init__ or constructor refused the values.
        raise PayloadDecodeError(f"$: {job_type.__name__} rejected the decoded values") from None
