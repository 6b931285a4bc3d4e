"""Why an attempt failed, without secrets: describing an exception and keeping the
failure history (migration 0006).

For each attempt that ends in :meth:`DatabaseQueue.fail`, one row records when, the
attempt number, the category, the exception's qualified type name and the site it was
raised at (the innermost frame of application code, ``module:function:line``). Never
the exception's message, its traceback or the payload: an application that wants a
text opts in with ``QueueOptions(describe_failure=callable)``, whose answer is kept
(at most :data:`DESCRIPTION_BYTES` of UTF-8) only if it is a string. The last
:data:`KEEP` failures of a job are kept; a success writes nothing.
"""
from __future__ import annotations

import functools
import os
import sysconfig
import traceback
from dataclasses import dataclass
from types import FrameType
from typing import Any, Callable, List, Optional, Sequence, Tuple, cast

import peewee

from caravel_lite.dialect import dialect_of
from caravel_lite.errors import InvalidField
from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.retry import retrying
from caravel_lite.schema import FAILURES_TABLE, JOBS_TABLE

KEEP = 20
DESCRIPTION_BYTES = 1024
TEXT_MAX = 255  # error_type and site columns

Describe = Callable[[BaseException], Optional[str]]


@dataclass(frozen=True)
class ErrorInfo:
    """What is stored about one exception: its type and where it was raised, and the
    application's own description when it gave one."""

    error_type: Optional[str] = None
    site: Optional[str] = None
    description: Optional[str] = None
    # Only with QueueOptions(record_errors=True) (caravel_lite.recorded_errors).
    message: Optional[str] = None
    trace: Optional[str] = None


def qualified_name(cls: type) -> str:
    """``smtplib.SMTPRecipientsRefused``; built-in exceptions by their bare name."""
    module = getattr(cls, "__module__", None) or ""
    name = getattr(cls, "__qualname__", None) or cls.__name__
    text = name if module in ("builtins", "") else f"{module}.{name}"
    return text[:TEXT_MAX]


@functools.lru_cache(maxsize=1)
def _library_roots() -> Tuple[str, ...]:
    """Directories whose code is not the application's: the standard library and
    installed third-party packages."""
    paths = sysconfig.get_paths()
    roots = {os.path.realpath(paths[key]) for key in ("stdlib", "platstdlib", "purelib",
                                                       "platlib") if paths.get(key)}
    return tuple(sorted(root + os.sep for root in roots))


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__") or "?")


def _is_caravel(module: str) -> bool:
    # The sample worker is an application built on the library, not the library.
    return (module == "caravel_lite" or module.startswith("caravel_lite.")) \
        and not module.startswith("caravel_lite.sample")


def _is_library(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename
    if filename.startswith("<"):  # <frozen ...>, <string>
        return True
    return os.path.realpath(filename).startswith(_library_roots())


def _format(frame: FrameType, line: int) -> str:
    code = frame.f_code
    function = getattr(code, "co_qualname", code.co_name)
    return f"{_module(frame)}:{function}:{line}"[:TEXT_MAX]


def raise_site(error: BaseException) -> Optional[str]:
    """``module:function:line`` of the innermost frame of application code in the
    exception's traceback: not caravel_lite, not the standard library, not an installed
    third-party package (an ``smtplib`` error is placed at the application's call).
    When every frame is library code, the outermost frame outside caravel_lite (the
    handler) is given; None without a traceback."""
    frames: List[Tuple[FrameType, int]] = [
        (frame, line) for frame, line in traceback.walk_tb(error.__traceback__)
        if not _is_caravel(_module(frame))]
    if not frames:
        return None
    for frame, line in reversed(frames):
        if not _is_library(frame):
            return _format(frame, line)
    frame, line = frames[0]
    return _format(frame, line)


def cap_description(text: str) -> str:
    """At most DESCRIPTION_BYTES of UTF-8, cut at a character boundary, a NUL written
    as the four characters \\x00 (PostgreSQL text cannot hold NUL: the failure's
    write was refused, leaving the job leased)."""
    data = text.replace("\x00", "\\x00").encode("utf-8", "replace")
    if len(data) <= DESCRIPTION_BYTES:
        return data.decode("utf-8")
    return data[:DESCRIPTION_BYTES].decode("utf-8", "ignore")


def describe(error: Optional[BaseException], describer: Optional[Describe] = None) -> ErrorInfo:
    """The :class:`ErrorInfo` of ``error`` (empty for None). ``describer`` is the
    application's ``describe_failure``: its errors and non-text answers are logged
    (by type) and ignored, so a faulty describer never stops a failure being kept."""
    if error is None:
        return ErrorInfo()
    text: Optional[str] = None
    if describer is not None:
        try:
            answer: Any = describer(error)
        except Exception as exc:
            logger.warning("describe_failure raised %s; the failure is kept without a "
                           "description", qualified_name(type(exc)),
                           extra=fields(error_type=qualified_name(type(exc))))
            answer = None
        if answer is not None and not isinstance(answer, str):
            logger.warning("describe_failure returned %s, not a str or None; ignored",
                           type(answer).__name__, extra=fields(error_type=type(answer).__name__))
            answer = None
        text = cap_description(answer) if answer else None
    return ErrorInfo(qualified_name(type(error)), raise_site(error), text)


class _NotOwned(Exception):
    """The fenced UPDATE matched nothing: roll the transaction back."""


class FailureLog:
    """Writes the failure history in the transaction that records the failure: the
    fenced UPDATE first (it keeps the job's row locked where the database locks rows,
    and SQLite's write lock is held throughout), so one job's failures are numbered
    one at a time, and a stale lease writes neither."""

    def __init__(self, db: peewee.Database) -> None:
        p = db.param
        t = FAILURES_TABLE
        self.db = db
        self.dialect = dialect_of(db)
        self._last_seq = f"SELECT MAX(seq) FROM {t} WHERE job_id = {p}"
        # queue and replay_count are read from the job's row itself.
        self._insert = (
            f"INSERT INTO {t} (job_id, seq, queue, failed_at, attempt, replays, category, "
            f"error_type, site, description, message, trace) SELECT id, {p}, queue, {p}, {p}, "
            f"replay_count, {p}, {p}, {p}, {p}, {p}, {p} FROM {JOBS_TABLE} WHERE id = {p}")
        self._trim = f"DELETE FROM {t} WHERE job_id = {p} AND seq <= {p}"

    def fail(self, fenced_sql: str, params: Sequence[Any], job_id: str, attempt: int,
             category: str, info: ErrorInfo, now_ms: int,
             then: Optional[Callable[[], None]] = None) -> bool:
        """Run the fenced UPDATE that records a failed attempt and, in the same
        transaction, its history row; True if the lease was owned. Lock conflicts are
        retried (outside a caller's transaction) like any fenced statement."""
        def attempt_once() -> bool:
            try:
                with self.dialect.write_transaction(self.db):
                    if self.db.execute_sql(fenced_sql, params).rowcount != 1:
                        raise _NotOwned
                    self.record(job_id, attempt, category, info, now_ms)
                    if then is not None:  # a batch member's count (caravel_lite.workflows)
                        then()
            except _NotOwned:
                return False
            return True
        return retrying(self.dialect, self.db, attempt_once)

    def record(self, job_id: str, attempt: int, category: str, info: ErrorInfo,
               now_ms: int) -> None:
        (last,) = self.db.execute_sql(self._last_seq, (job_id,)).fetchone()
        seq = (last or 0) + 1
        self.db.execute_sql(self._insert, (seq, now_ms, attempt, category, info.error_type,
                                           info.site, info.description, info.message,
                                           info.trace, job_id))
        if seq > KEEP:
            self.db.execute_sql(self._trim, (job_id, seq - KEEP))


def check_describer(value: object) -> Optional[Describe]:
    """``describe_failure`` must be None or a callable."""
    if value is not None and not callable(value):
        raise InvalidField("describe_failure", "must be a callable taking the exception "
                           "and returning a str or None")
    return cast(Optional[Describe], value)


__all__ = ["ErrorInfo", "FailureLog", "KEEP", "DESCRIPTION_BYTES", "describe",
           "qualified_name", "raise_site", "cap_description", "check_describer"]
