"""Recorded errors, an explicit opt-in: ``QueueOptions(record_errors=True)``.

By default a failed attempt stores its category, the exception's type and the site it
was raised at, never its message: messages often carry payload values, addresses,
tokens. An application whose messages are safe to keep (or made safe by
``QueueOptions(redact=callable)``, which sees each message first) opts in, and then
each failed attempt also stores

- the message, ``str(exception)`` passed through ``redact``, at most
  :data:`MESSAGE_BYTES` of UTF-8;
- a short traceback: one line per frame, ``file:line in function``, the innermost
  :data:`TRACE_FRAMES` frames, never a local variable or a source line.

A ``redact`` that raises or returns something other than text stores no message (the
failure is still kept).
"""
from __future__ import annotations

import dataclasses
import os
import traceback
from typing import TYPE_CHECKING, Optional

from caravel_lite.failures import ErrorInfo, cap_description, qualified_name
from caravel_lite.observability import logger
from caravel_lite.logfields import fields

if TYPE_CHECKING:
    from caravel_lite.options import QueueOptions

__all__ = ["recorded", "message_of", "short_trace", "MESSAGE_BYTES", "TRACE_FRAMES"]

MESSAGE_BYTES = 1024
TRACE_FRAMES = 20
# The last components of a frame's file name kept (package/module.py, not the path of
# the deployment).
PATH_PARTS = 3


def message_of(error: BaseException, options: "QueueOptions") -> Optional[str]:
    """The message to store for ``error`` (redacted, capped), or None when
    ``record_errors`` is off or there is none."""
    if not options.record_errors:
        return None
    try:
        text: object = str(error)
    except Exception:  # a __str__ that fails: nothing to store
        return None
    if options.redact is not None:
        try:
            text = options.redact(str(text))
        except Exception as exc:
            logger.warning("redact raised %s; the failure is kept without its message",
                           qualified_name(type(exc)),
                           extra=fields(error_type=qualified_name(type(exc)), component="redact"))
            return None
        if text is not None and not isinstance(text, str):
            logger.warning("redact returned %s, not a str or None; no message kept",
                           type(text).__name__, extra=fields(component="redact"))
            return None
    if not text:
        return None
    assert isinstance(text, str)
    return cap_description(text)  # 1 KiB, NUL escaped: as describe_failure's text


def short_trace(error: BaseException) -> Optional[str]:
    """``file:line in function`` per frame, innermost last, at most TRACE_FRAMES."""
    frames = list(traceback.walk_tb(error.__traceback__))[-TRACE_FRAMES:]
    if not frames:
        return None
    lines = []
    for frame, line in frames:
        code = frame.f_code
        path = code.co_filename.replace(os.sep, "/").split("/")[-PATH_PARTS:]
        lines.append(f"{'/'.join(path)}:{line} in {getattr(code, 'co_qualname', code.co_name)}")
    return "\n".join(lines)


def recorded(info: ErrorInfo, error: Optional[BaseException],
             options: "QueueOptions") -> ErrorInfo:
    """``info`` with the message and short traceback of ``error`` when the options
    record errors; ``info`` itself otherwise."""
    if error is None or not options.record_errors:
        return info
    return dataclasses.replace(info, message=message_of(error, options),
                               trace=short_trace(error))
