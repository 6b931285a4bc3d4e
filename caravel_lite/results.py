"""Kept results: a handler's return value stored with its job, and how callers read it.

A job keeps its result when its type (``registry.job(..., keep_result=True)``) or its
``Dispatch(keep_result=True)`` asks for it. On completion the return value is encoded
(:func:`encode`) and written by the completing UPDATE itself, fenced by the lease like
every completion: a result exists only for a completed job, exactly once. What can be
stored: JSON values (None, bool, int, float, str, lists, dicts with str keys) that
round-trip exactly, and instances of the dataclass the handler's return annotation
names, through the payload codec's rules (UUID, Decimal, aware datetimes, enums,
nested dataclasses); at most ``QueueOptions.max_result_bytes`` of UTF-8. Anything else
fails the attempt with ``Failure.INVALID_RESULT`` (retried like any failure).

Results are read with the tenant rules of ``status``: :meth:`Results.result`,
:meth:`Results.wait` and their asyncio forms. They live in the job's row, so
``prune`` removes them with their jobs, and operators see them only where they may see
payloads (``QueueAdmin.job(..., include_payload=True)``, ``show --show-payload``, the
dashboard's ``--show-payloads``).
"""
from __future__ import annotations

import dataclasses
import json
import time
import typing
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Union

import peewee

from caravel_lite import codec, finished_signal, validation
from caravel_lite.clock import floor_ms, from_ms
from caravel_lite.errors import InvalidField
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.statements import COMPLETED, LEASED
from caravel_lite.values import Failure, JobResult, JobState, QueueLease

if TYPE_CHECKING:
    from caravel_lite.dialect import Dialect
    from caravel_lite.observability import Telemetry
    from caravel_lite.options import QueueOptions
    from caravel_lite.registry import JobDefinition, JobRegistry

__all__ = ["Results", "ResultNotStorable", "encode", "decode", "FINISHED_STATES"]

# States after which a job never runs again on its own (a replay is deliberate); an
# operator's cancel (caravel_lite.cancel) is one of them.
FINISHED_STATES = frozenset({JobState.COMPLETED.value, JobState.DEAD_LETTER.value,
                             JobState.CANCELLED.value})
# How often wait() looks again where there is no change signal: fast at first, then
# backing off to the slower rate (a read per look).
POLL_FIRST = 0.02
POLL_MAX = 0.25
# Where the database signals commits (SQLite's PRAGMA data_version), how often the
# signal is looked at: a pragma read, far cheaper than reading the row.
SIGNAL_PROBE = 0.01
DEFAULT_WAIT = 30.0


class ResultNotStorable(Exception):
    """A handler's return value that cannot be kept (the attempt fails as
    ``INVALID_RESULT``). Its message names the reason, never the value."""


def _return_type(definition: JobDefinition) -> Any:
    cached = _RETURN_TYPES.get(definition.handler, _MISSING)
    if cached is _MISSING:
        try:
            cached = typing.get_type_hints(definition.handler).get("return")
        except Exception:  # an annotation that does not resolve: no dataclass result
            cached = None
        if not (isinstance(cached, type) and dataclasses.is_dataclass(cached)):
            cached = None
        _RETURN_TYPES[definition.handler] = cached
    return cached


_MISSING = object()
_RETURN_TYPES: Dict[Callable[..., Any], Any] = {}


def encode(value: Any, definition: JobDefinition, max_bytes: int) -> str:
    """The stored text of a handler's return value; :class:`ResultNotStorable` if it
    cannot be stored or read back as an equal value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = _return_type(definition)
        if kind is None or type(value) is not kind:
            raise ResultNotStorable(
                f"a dataclass result must be of the handler's annotated return type "
                f"(got {type(value).__name__})")
        try:
            text = codec.encode(value)
            same = codec.same_job(codec.decode(kind, text), value)
        except (InvalidField, codec.PayloadDecodeError) as exc:
            raise ResultNotStorable(f"{kind.__name__} cannot be stored: {exc}") from None
        if not same:
            raise ResultNotStorable(f"{kind.__name__} would not round-trip")
    else:
        try:
            text = json.dumps(value, sort_keys=True, separators=(",", ":"),
                              ensure_ascii=False, allow_nan=False)
            same = _same_json(json.loads(text), value)
        except (TypeError, ValueError, RecursionError):
            raise ResultNotStorable(f"a {type(value).__name__} is not a JSON value") from None
        if not same:
            raise ResultNotStorable(f"a {type(value).__name__} would not read back as "
                                    f"itself (tuples, non-str keys)")
    try:
        size = codec.utf8_size(text)
    except UnicodeEncodeError:  # a lone surrogate (os.fsdecode of a bad name, say)
        raise ResultNotStorable("a str in the result is not valid UTF-8 text") from None
    if size > max_bytes:
        raise ResultNotStorable(f"{size} bytes exceeds max_result_bytes ({max_bytes})")
    return text


def _same_json(back: Any, value: Any) -> bool:
    """Equal and of the same JSON types all the way down (1 is not True, a tuple is
    not a list)."""
    if type(back) is not type(value):
        return isinstance(value, float) and isinstance(back, float)
    if isinstance(value, list):
        return len(back) == len(value) and all(map(_same_json, back, value))
    if isinstance(value, dict):
        return back.keys() == value.keys() and all(_same_json(back[k], value[k])
                                                   for k in value)
    return bool(back == value)


def decode(text: Optional[str], definition: Optional[JobDefinition]) -> Any:
    """A stored result as the handler returned it: its annotated dataclass where the
    wire name is registered here and the text decodes to it; otherwise the plain JSON
    value (a deploy that changed the annotation still reads old results)."""
    if text is None:
        return None
    kind = _return_type(definition) if definition is not None else None
    if kind is not None:
        try:
            return codec.decode(kind, text)
        except codec.PayloadDecodeError:
            pass
    return json.loads(text)


def _seconds(value: Union[float, int, timedelta]) -> float:
    if isinstance(value, timedelta):
        value = value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 86400:
        raise InvalidField("timeout", f"must be 0 .. 86400 seconds (or a timedelta), got {value!r}")
    return float(value)


class Results:
    """``complete_with_result``, ``result``, ``wait``, ``aresult`` and
    ``await_result``, mixed into :class:`caravel_lite.DatabaseQueue`."""

    # Set by DatabaseQueue.__init__; declared here for type checkers.
    db: peewee.Database
    dialect: Dialect
    registry: JobRegistry
    options: QueueOptions
    clock: Any
    telemetry: Telemetry

    if TYPE_CHECKING:  # DatabaseQueue's
        def _fenced(self, sql: str, params: Any, job_id: Optional[str] = None,
                    wrote: Any = None, then: Optional[Callable[[], None]] = None) -> int: ...

        def _then(self, lease: QueueLease, state: str,
                  now_ms: int) -> Optional[Callable[[], None]]: ...

        def _now_us(self) -> int: ...

        def _offload(self) -> Any: ...

    def complete_with_result(self, lease: QueueLease, text: str) -> bool:
        """:meth:`complete` that also stores ``text`` (from :func:`encode`) as the job's
        result, in the same fenced UPDATE. False (nothing changed) if not owned. A
        lost reply: the row is read back, and True when it is COMPLETED by this call's
        write (else the statement is sent again; it changes nothing once the lease is
        gone)."""
        from caravel_lite.fences import left_as  # the queue's own module graph

        now_ms = floor_ms(self._now_us())
        ident = lease._id_text()
        p = self.db.param
        sql = (f"UPDATE {JOBS_TABLE} SET state = '{COMPLETED}', lease_token = NULL, "
               f"lease_expires_at = NULL, last_failure = NULL, result = {p}, "
               f"finished_at = {p}, updated_at = {p} WHERE id = {p} AND state = '{LEASED}' "
               f"AND lease_token = {p} AND lease_expires_at > {p}")
        done = self._fenced(sql, (text, now_ms, now_ms, ident, lease._token, now_ms), ident,
                            left_as(COMPLETED, now_ms, lease, lease.attempt),
                            self._then(lease, COMPLETED, now_ms)) == 1
        if done:
            self.telemetry.count("completed", lease.context.queue)
        return done

    def result(self, job_id: Union[uuid.UUID, str], queue_name: str,
               tenant_id: str) -> Optional[JobResult]:
        """What became of the job: its state, its kept return value (None unless it
        completed keeping its result), when it finished (None until then), when its
        last attempt began, its attempts and last failure. None for an unknown id,
        another queue or another tenant (matched exactly, as :meth:`status`)."""
        ident = validation.check_uuid("job_id", job_id)
        validation.check_queue(queue_name, "queue_name")
        validation.check_identity("tenant_id", tenant_id)
        p = self.db.param
        row = self.db.execute_sql(
            f"SELECT queue, tenant_id, state, result, finished_at, claimed_at, attempts, "
            f"last_failure, wire_name FROM {JOBS_TABLE} WHERE id = {p} AND queue = {p} "
            f"AND tenant_id = {p}", (ident, queue_name, tenant_id)).fetchone()
        if row is None or row[0] != queue_name or row[1] != tenant_id:
            return None
        state, text, finished, started, attempts, failure, wire_name = row[2:]
        finished_at = from_ms(int(finished)) if finished is not None else None
        return JobResult(uuid.UUID(ident), JobState(state),
                         decode(text, self.registry.for_name(wire_name))
                         if state == COMPLETED else None,
                         finished_at if state in FINISHED_STATES else None,
                         from_ms(int(started)) if started is not None else None,
                         int(attempts), Failure(failure) if failure else None)

    def wait(self, job_id: Union[uuid.UUID, str], queue_name: str, tenant_id: str, *,
             timeout: Union[float, timedelta] = DEFAULT_WAIT) -> Optional[JobResult]:
        """Block until the job is finished (completed, dead-lettered, a discard
        included, or cancelled) and return its :meth:`result`; None at once for an unknown job or
        another tenant. Raises ``TimeoutError`` when it is not finished within
        ``timeout`` (seconds or a timedelta, default 30 s; 0 looks once).

        Where the database signals commits (SQLite's ``PRAGMA data_version``), the row
        is read again only after another connection committed; on PostgreSQL (with
        psycopg 3) a job that stores options (a kept result among them) is announced
        when it finishes (migration 0008's trigger) and read at once, on a connection
        of the wait's own; otherwise the row is read at a backing-off interval (20 ms
        to 250 ms). Holds no transaction while it waits; reads only, so a lost reply
        is just read again."""
        limit = time.monotonic() + _seconds(timeout)
        signal = self.dialect.change_signal
        delay = POLL_FIRST
        version = self._data_version() if signal == "data_version" else None
        # LISTEN before the first read: a job finishing in between is still heard.
        listener = finished_signal.open_listener(self.db, signal == "notify")
        try:
            while True:
                found = self.result(job_id, queue_name, tenant_id)
                if found is None or found.finished:
                    return found
                while True:
                    left = limit - time.monotonic()
                    if left <= 0:
                        raise TimeoutError(f"job {found.job_id} not finished within "
                                           f"{timeout}")
                    if version is not None:
                        time.sleep(min(SIGNAL_PROBE, left))
                        seen = self._data_version()
                        if seen != version:
                            version = seen
                            break
                        continue
                    if listener is not None:
                        # Woken when announced; else read at the polling interval (jobs
                        # without stored options are not announced).
                        listener.wait(str(found.job_id), min(delay, left))
                    else:
                        time.sleep(min(delay, left))
                    delay = min(delay * 2, POLL_MAX)
                    break
        finally:
            if listener is not None:
                listener.close()

    def _data_version(self) -> int:
        return int(self.db.execute_sql("PRAGMA data_version").fetchone()[0])

    async def aresult(self, job_id: Union[uuid.UUID, str], queue_name: str,
                      tenant_id: str) -> Optional[JobResult]:
        """:meth:`result` without blocking the event loop."""
        return typing.cast(Optional[JobResult], await self._offload().call(
            self.result, job_id, queue_name, tenant_id))

    async def await_result(self, job_id: Union[uuid.UUID, str], queue_name: str,
                           tenant_id: str, *,
                           timeout: Union[float, timedelta] = DEFAULT_WAIT
                           ) -> Optional[JobResult]:
        """:meth:`wait` without blocking the event loop: each look is an
        :meth:`aresult` on the queue's async threads, none held in between (looks at a
        backing-off interval, 20 ms to 250 ms)."""
        # Not imported at caravel_lite's import (asyncio was about a seventh of its
        # time); the running event loop has imported it: this is a dictionary look-up.
        import asyncio

        limit = time.monotonic() + _seconds(timeout)
        delay = POLL_FIRST
        while True:
            found = await self.aresult(job_id, queue_name, tenant_id)
            if found is None or found.finished:
                return found
            left = limit - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"job {found.job_id} not finished within {timeout}")
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, POLL_MAX)
