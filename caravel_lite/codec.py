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
import inspect
import json
import math
import re
import types
import typing
import uuid
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Optional, Set, Tuple

from caravel_lite.errors import InvalidField

MAX_DEPTH = 32


class PayloadDecodeError(ValueError):
    """A stored payload does not fit the registered type (recorded as INVALID_PAYLOAD).

    The message names the path inside the payload, never its values."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_surrogate(text: str) -> bool:
    """True if ``text`` holds a lone surrogate (valid in a Python str, not in UTF-8)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


# Integers with more bits than this are checked against the interpreter's limit on
# int <-> str conversion (sys.get_int_max_str_digits, 4300 digits by default), which
# json.dumps would otherwise hit with a bare ValueError. 4000 bits are about 1200
# digits, well under any limit the interpreter allows (640 at the least).
_BIG_INT_BITS = 4000


def _int_text_fits(value: int) -> bool:
    """True when ``value`` converts to decimal text (and back) in this interpreter."""
    if value.bit_length() <= _BIG_INT_BITS:
        return True
    try:
        int.__repr__(value)
    except ValueError:
        return False
    return True


def _float_hint(hint: Any) -> bool:
    """True for ``float`` and ``Optional[float]``: the decoder turns an int stored under
    such an annotation into a float, so the encoder stores it as one."""
    if hint is float:
        return True
    if typing.get_origin(hint) in _UNION_TYPES:
        args = typing.get_args(hint)
        return len(args) == 2 and float in args and _NONE in args
    return False


def _item_hint(hint: Any, index: int) -> Any:
    """The annotation of a list, tuple or dict item under ``hint`` (Any if unknown)."""
    if typing.get_origin(hint) in _UNION_TYPES:
        options = [a for a in typing.get_args(hint) if a is not _NONE]
        hint = options[0] if len(options) == 1 else Any
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (list, typing.List) and len(args) == 1:
        return args[0]
    if origin in (dict, typing.Dict) and len(args) == 2:
        return args[1]
    if origin in (tuple, typing.Tuple) and args:
        if len(args) == 2 and args[1] is Ellipsis:
            return args[0]
        return args[index] if index < len(args) else Any
    return Any


def _to_plain(value: Any, depth: int, path: str, hint: Any = Any) -> Any:
    """Turn a supported value into plain JSON data, enforcing the depth limit.

    Equal values give equal data: ``-0.0`` is stored as ``0.0``, and an int under a
    ``float`` annotation as a float (decoding makes it one anyway). ``path`` names
    dataclass fields and list positions, and a dict entry only by its position
    (``$.data[#0]``), so that no error message carries a key or a value of the payload.
    """
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str) and has_surrogate(value):
            raise InvalidField("payload", f"{path}: unpaired surrogate in string")
        return value
    if isinstance(value, enum.Enum):
        return _to_plain(value.value, depth, path)
    if isinstance(value, int):
        if not _int_text_fits(value):
            raise InvalidField("payload", f"{path}: integer has more digits than this "
                               "interpreter converts to text")
        if _float_hint(hint):
            try:
                return float(value)
            except OverflowError:
                raise InvalidField("payload", f"{path}: integer too large for a float "
                                   "field") from None
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidField("payload", f"{path}: NaN and infinity are not valid JSON")
        return value or 0.0  # -0.0 == 0.0: both are stored as 0.0
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
        hints = _field_hints(type(value))
        return {f.name: _to_plain(getattr(value, f.name), depth + 1, f"{path}.{f.name}",
                                  hints.get(f.name, Any))
                for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_to_plain(item, depth + 1, f"{path}[{i}]", _item_hint(hint, i))
                for i, item in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        item_hint = _item_hint(hint, 0)
        for i, (key, item) in enumerate(value.items()):
            if not isinstance(key, str):
                raise InvalidField("payload", f"{path}: dict keys must be str, got {type(key).__name__}")
            if has_surrogate(key):
                raise InvalidField("payload", f"{path}[#{i}]: unpaired surrogate in a key")
            out[key] = _to_plain(item, depth + 1, f"{path}[#{i}]", item_hint)
        return out
    raise InvalidField("payload", f"{path}: values of type {type(value).__name__} are not supported")


def _field_hints(cls: type) -> Dict[str, Any]:
    """The resolved annotations of a dataclass; {} when they cannot be resolved (the
    values are then encoded without them, and the round-trip proof decides)."""
    try:
        return _hints(cls)
    except Exception:
        return {}


# One encoder object for every call: json.dumps with non-default options builds a new
# encoder each time.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                            allow_nan=False)
# The string escaper _ENCODER itself uses (ensure_ascii=False), for the scalar fast path.
_json_string = json.encoder.encode_basestring


def encode(job: Any) -> str:
    """The canonical JSON text of a job (a dataclass instance)."""
    if not dataclasses.is_dataclass(job) or isinstance(job, type):
        raise InvalidField("job", f"must be a dataclass instance, got {type(job).__name__}")
    return _ENCODER.encode(_to_plain(job, 0, "$"))


# -- the fast path: jobs made of plain scalars -----------------------------------------
#
# Enqueue must prove that the stored text decodes back to an equal job (see
# caravel_lite.envelope). For the common job, a flat dataclass of str/int/float/bool
# fields, that proof needs no JSON parsing: a value whose exact type is the field's
# annotation comes back from JSON unchanged, so decoding would call the constructor
# with the very same values. encode_scalars checks exactly that and calls the
# constructor itself; anything else takes the general path.

_NONE = type(None)
_SCALARS = (str, int, float, bool)
_ANY_SCALAR: FrozenSet[type] = frozenset(_SCALARS + (_NONE,))
Plan = Tuple[Tuple[str, FrozenSet[type]], ...]


@dataclass(frozen=True)
class _ScalarPlan:
    """How to check and write one flat job type: ``fields`` in declaration order, each
    with the exact value types accepted, and ``text_order``: the field indexes in the
    canonical text's (sorted) key order, each with its key already written as
    ``"name":``."""

    fields: Plan
    text_order: Tuple[Tuple[int, str], ...]
    # Whether an accepted job is rebuilt and compared (see _plain): False only where
    # building the type from a job's own field values can give nothing but an equal job.
    rebuild: bool = True


def _written_by_dataclass(job_type: type, name: str) -> bool:
    """The class's own ``name`` is a method @dataclass generated (its code compiled from
    text, not from a source file)."""
    code = getattr(job_type.__dict__.get(name), "__code__", None)
    return code is not None and code.co_filename == "<string>"


def _plain(job_type: type) -> bool:
    """True when constructing ``job_type`` only stores its arguments and equality only
    compares the stored fields: ``__init__`` and ``__eq__`` are the ones @dataclass wrote
    on the class itself, there is no ``__post_init__``, no ``__new__``, no
    ``__setattr__`` but object's or a frozen dataclass's, no metaclass ``__call__``, no
    ``__getattribute__`` or ``__getattr__`` of its own, and no field name is a data
    descriptor of the class. Then a job rebuilt from its own scalar values equals it
    by construction, and the trial rebuild would prove nothing."""
    params = getattr(job_type, "__dataclass_params__", None)
    if params is None or not (params.init and params.eq) or hasattr(job_type, "__post_init__"):
        return False
    if job_type.__new__ is not object.__new__:  # type: ignore[comparison-overlap]
        return False
    if not (_written_by_dataclass(job_type, "__init__")
            and _written_by_dataclass(job_type, "__eq__")):
        return False
    setter = job_type.__setattr__
    if setter is not object.__setattr__ and not (  # type: ignore[comparison-overlap]
            params.frozen and _written_by_dataclass(job_type, "__setattr__")):
        return False
    # Construction through a metaclass of its own, and reads through hooks of the
    # class's own, can change what is built or what is seen.
    meta_call: Any = type(job_type).__call__
    reader: Any = job_type.__getattribute__
    if meta_call is not type.__call__ or reader is not object.__getattribute__ \
            or hasattr(job_type, "__getattr__"):
        return False
    # A field whose class attribute is a data descriptor stores through it (read as
    # stored on the class, not through the descriptor's own __get__).
    return not any(hasattr(type(inspect.getattr_static(job_type, f.name, None)), "__set__")
                   for f in dataclasses.fields(job_type))


_PLANS: Dict[type, Optional[_ScalarPlan]] = {}  # job type -> plan or None, on first use


def _exact_types(hint: Any) -> Optional[FrozenSet[type]]:
    """The value types that JSON gives back unchanged under ``hint``: for str, int,
    float, bool, their Optional forms and Any; None for every other annotation."""
    if hint is Any:
        return _ANY_SCALAR
    if hint in _SCALARS:
        return frozenset((hint,))
    if typing.get_origin(hint) in _UNION_TYPES:
        args = typing.get_args(hint)
        if len(args) == 2 and _NONE in args:
            other = args[0] if args[1] is _NONE else args[1]
            if other in _SCALARS:
                return frozenset((other, _NONE))
    return None


def _scalar_plan(job_type: type) -> Optional[_ScalarPlan]:
    """The plan of ``job_type`` when every one of its fields is a scalar the
    constructor takes (no init=False field, no InitVar), else None."""
    try:
        return _PLANS[job_type]
    except KeyError:
        pass
    plan: Optional[_ScalarPlan] = None
    try:
        fields = dataclasses.fields(job_type)
        if (len(fields) == len(getattr(job_type, "__dataclass_fields__"))
                and all(f.init for f in fields)):
            hints = _hints(job_type)
            kinds = [(f.name, _exact_types(hints.get(f.name, Any))) for f in fields]
            checks = tuple((name, types_) for name, types_ in kinds if types_ is not None)
            if len(checks) == len(kinds):
                order = sorted(range(len(checks)), key=lambda index: checks[index][0])
                plan = _ScalarPlan(checks, tuple(
                    (index, _json_string(checks[index][0]) + ":") for index in order),
                    not _plain(job_type))
    except Exception:  # unresolvable annotations and the like: the general path decides
        plan = None
    _PLANS[job_type] = plan
    return plan


def _scalar_text(value: Any) -> str:
    """The JSON text _ENCODER writes for one checked scalar (a finite float, an int of
    a convertible size, a str without lone surrogates, a bool or None)."""
    kind = type(value)
    if kind is str:
        return _json_string(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    # int.__repr__ and float.__repr__, as json's encoder writes them
    return int.__repr__(value) if kind is int else float.__repr__(value)


def encode_scalars(job_type: type, job: Any) -> Optional[str]:
    """The canonical text of ``job`` (exactly what :func:`encode` returns) when it is
    proven to decode back to an equal job without parsing; None when the general
    encode-and-decode proof must decide (and raise, if the job cannot be stored)."""
    if type(job) is not job_type:
        return None
    plan = _scalar_plan(job_type)
    if plan is None:
        return None
    values = []
    for name, accepted in plan.fields:
        value = getattr(job, name)
        kind = type(value)
        if kind not in accepted:
            return None
        if kind is str:
            if has_surrogate(value):
                return None
        elif kind is float:
            if not math.isfinite(value):
                return None
            value = value or 0.0  # -0.0 is stored as 0.0, as the general path does
        elif kind is int and value.bit_length() > _BIG_INT_BITS:
            return None  # the general path checks it against the interpreter's limit
        values.append(value)
    if plan.rebuild:
        try:
            # What decoding would build: the constructor (and any __post_init__)
            # applied to the same values.
            rebuilt = job_type(**{name: value for (name, _), value
                                  in zip(plan.fields, values)})
        except Exception:
            return None
        if not same_job(rebuilt, job):
            return None
    # Written here rather than by _ENCODER: the same text (the tests compare the two),
    # without building the encoder's machinery on every enqueue.
    return "{" + ",".join([key + _scalar_text(values[index])
                           for index, key in plan.text_order]) + "}"


def same_job(decoded: Any, job: Any) -> bool:
    """Equal values, also for job classes declared with ``eq=False`` (compared field by
    field rather than by identity)."""
    if type(decoded) is not type(job):
        return False
    if getattr(type(job), "__dataclass_params__").eq:
        return bool(decoded == job)
    return dataclasses.astuple(decoded) == dataclasses.astuple(job)


def utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _fail(path: str, expected: str) -> PayloadDecodeError:
    return PayloadDecodeError(f"{path}: expected {expected}")


_UNION_TYPES: Tuple[Any, ...] = (typing.Union, types.UnionType)  # Optional[X], X | None


_BARE_CONTAINERS = {list: typing.List[Any], dict: typing.Dict[str, Any],
                    tuple: typing.Tuple[Any, ...],
                    # typing's bare aliases have no arguments either; a bare Tuple
                    # read as "exactly no items" refused every non-empty tuple
                    typing.List: typing.List[Any], typing.Dict: typing.Dict[str, Any],
                    typing.Tuple: typing.Tuple[Any, ...]}


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
        return {k: _from_plain(value_tp, v, f"{path}[#{i}]")
                for i, (k, v) in enumerate(data.items())}
    if origin is not None:
        raise _fail(path, f"a supported type (not {tp})")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
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
        try:
            return float(data)
        except OverflowError:
            raise _fail(path, "a number within the range of a float") from None
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
            instant = dt.datetime.fromisoformat(data)
        except (ValueError, TypeError):
            raise _fail(path, "an ISO 8601 datetime") from None
        if instant.tzinfo is None:
            raise _fail(path, "an aware datetime")
        return instant
    if tp is dt.date:
        try:
            return dt.date.fromisoformat(data)
        except (ValueError, TypeError):
            raise _fail(path, "an ISO 8601 date") from None
    raise _fail(path, f"a supported type (not {tp!r})")


# What a field's annotation may name: the types _from_plain decodes (and _to_plain
# encodes to the text they decode from).
_LEAF_TYPES = (bool, int, float, str, uuid.UUID, decimal.Decimal, dt.datetime, dt.date)
_ENUM_VALUES = (str, int, float, bool, type(None))
SUPPORTED = ("str, int, float, bool, None, UUID, Decimal, datetime, date, an Enum of "
             "scalars, a dataclass, list[X], tuple[X, ...], tuple[X, Y], dict[str, X], "
             "Optional or Union of these, Any")


class UnresolvedAnnotations(InvalidField):
    """A job type's annotations name something not defined (yet): a forward reference
    to a class defined after the type is registered resolves later, so this can only be
    judged when its jobs are first stored."""


def check_job_type(job_type: type) -> None:
    """Refuse, as ``InvalidField("job_type")`` naming the field, a dataclass type whose
    jobs could never be stored and decoded again: an annotation the decoder has no rule
    for (``set[str]``, ``bytes``, ``dict[int, str]``, a class of its own), annotations
    that do not resolve (:class:`UnresolvedAnnotations` when a name is not defined), or
    a field the constructor does not take (``init=False``). A type that passes may
    still be given values that do not fit (checked at enqueue)."""
    _check_dataclass(job_type, job_type.__name__, set())


def _check_dataclass(cls: type, path: str, seen: Set[type]) -> None:
    if cls in seen:
        return  # a recursive type: its fields are being checked already
    seen.add(cls)
    try:
        hints = _hints(cls)
    except Exception as exc:
        refused = UnresolvedAnnotations if isinstance(exc, NameError) else InvalidField
        raise refused("job_type", f"{path}: its annotations do not resolve "
                      f"({type(exc).__name__}), so its jobs could not be decoded") from None
    for f in dataclasses.fields(cls):
        where = f"{path}.{f.name}"
        if not f.init:
            raise InvalidField("job_type", f"field {where} has init=False: it is stored "
                               f"but the constructor cannot take it back")
        _check_hint(hints.get(f.name, Any), where, seen)


def _check_hint(hint: Any, path: str, seen: Set[type]) -> None:
    if hint is Any or hint is _NONE or hint in _BARE_CONTAINERS:
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in _UNION_TYPES or origin in (list, typing.List) or (
            origin in (tuple, typing.Tuple)):
        for arg in args:
            if arg is not Ellipsis:
                _check_hint(arg, path, seen)
        return
    if origin in (dict, typing.Dict):
        if args and args[0] is not str:
            raise InvalidField("job_type", f"field {path}: {_shown(hint)} cannot be stored: "
                               f"JSON object keys are str (use dict[str, ...])")
        for arg in args[1:]:
            _check_hint(arg, path, seen)
        return
    if origin is None and isinstance(hint, type):
        if dataclasses.is_dataclass(hint):
            _check_dataclass(hint, path, seen)
            return
        if issubclass(hint, enum.Enum):
            if all(isinstance(m.value, _ENUM_VALUES) for m in hint):
                return
            raise InvalidField("job_type", f"field {path}: {hint.__name__}'s values are "
                               f"not all str, int, float, bool or None")
        if hint in _LEAF_TYPES:
            return
    raise InvalidField("job_type", f"field {path}: {_shown(hint)} cannot be stored in a "
                       f"payload (supported: {SUPPORTED})")


def _shown(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else repr(hint)


_HINTS: Dict[type, Dict[str, Any]] = {}


def _hints(cls: type) -> Dict[str, Any]:
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


def _decode_scalars(job_type: type, data: Any) -> Any:
    """The job, when ``data`` holds every field of a flat scalar job with exactly the
    annotated types (what the general decoder would build, without walking the
    annotations); None when the general decoder must decide."""
    plan = _scalar_plan(job_type)
    if plan is None or type(data) is not dict or len(data) != len(plan.fields):
        return None
    for name, accepted in plan.fields:
        if name not in data or type(data[name]) not in accepted:
            return None
    try:
        return job_type(**data)
    except Exception:  # the general decoder reports the constructor's refusal
        return None


def decode(job_type: type, text: str) -> Any:
    """Decode stored JSON into an instance of ``job_type``; raises PayloadDecodeError."""
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        raise PayloadDecodeError("$: not valid JSON") from None
    job = _decode_scalars(job_type, data)
    if job is not None:
        return job
    try:
        return _decode_dataclass(job_type, data, "$")
    except PayloadDecodeError:
        raise
    except (TypeError, ValueError, RecursionError):
        # The type's own __post_init__ or constructor refused the values.
        raise PayloadDecodeError(f"$: {job_type.__name__} rejected the decoded values") from None
