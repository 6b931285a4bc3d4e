"""W3C trace context carried from the code that enqueues a job to the worker that runs
it, through the OpenTelemetry API when it is installed.

- :func:`capture`: when a valid span is current (OpenTelemetry installed, a span
  active), the ``traceparent`` and ``tracestate`` of that span as the small JSON text
  stored in the job's (or outbox intent's) ``trace_context`` column; otherwise None,
  and nothing is stored. Baggage is never stored: it is the application's data and
  may name a user or a tenant.
- :func:`origin` and :func:`relate`: how the worker's ``caravel.queue.process`` span
  relates to the stored context, by ``QueueOptions(trace_relation=...)``:

  - ``"child"`` (the default): the job's first run (attempt 1, never replayed) is a
    child of the enqueuing span, in the request's trace; a retry or a replay starts a
    trace of its own with a link to that span (a child of a request that ended long
    ago makes strange traces: spans hours after their root, a root "longer" than the
    request was);
  - ``"link"``: every run starts its own trace, linked to the enqueuing span;
  - ``"none"``: the stored context is ignored.

A stored value that is not what :func:`capture` writes (edited by hand, truncated,
written by another program) is ignored, never a failure: the job runs with no parent
and no link.
"""
from __future__ import annotations

import importlib
import json
import logging
from typing import Any, List, NamedTuple, Optional, Tuple

import peewee

from caravel_lite.logfields import lease_fields
from caravel_lite.schema import JOBS_TABLE

logger = logging.getLogger("caravel_lite")

CHILD = "child"
LINK = "link"
NONE = "none"
TRACE_RELATIONS = (CHILD, LINK, NONE)

# W3C Trace Context: a tracestate longer than this may be dropped by a propagator
# ("at least 512 characters" must be propagated); a longer one is left out, keeping
# the traceparent, rather than stored unbounded.
MAX_TRACESTATE = 512


def _optional(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - exercised only where the API is absent
        return None


# The OpenTelemetry API, found on first use and never at import: where it is installed,
# a process that imports caravel_lite and never enqueues (a cron job that only runs
# jobs, a command that only reads) would pay for importing it at every start. Until
# _load() ran these names are unbound; read from outside the module they are loaded
# first (__getattr__).
_loaded = False
_trace: Any
_w3c: Any
_current_context: Any
_span_key: Any
_LOADED_NAMES = ("_trace", "_w3c", "_current_context", "_span_key")


def _span_slot() -> Tuple[Any, Any]:
    """(the context variable OpenTelemetry keeps the current context in, the key of the
    current span in it), or (None, None) where the runtime context is another kind
    (``OTEL_PYTHON_CONTEXT``) or the API's layout has changed: then :func:`capture`
    asks the public ``get_current_span``. Reading the variable directly saves every
    enqueue the four calls the public path makes to find that no span is current."""
    try:
        from opentelemetry import context as otel_context
        from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
        from opentelemetry.trace.propagation import _SPAN_KEY
        runtime = getattr(otel_context, "_RUNTIME_CONTEXT")
        if type(runtime) is not ContextVarsRuntimeContext:  # a subclass may read otherwise
            return None, None
        variable = runtime._current_context
        variable.get().get(_SPAN_KEY)  # the shape assumed below
    except Exception:
        return None, None
    return variable, _SPAN_KEY


def _load() -> None:
    """Find the OpenTelemetry API (or its absence) once per process."""
    global _loaded, _trace, _w3c, _current_context, _span_key
    _trace = _optional("opentelemetry.trace")
    _w3c = _optional("opentelemetry.trace.propagation.tracecontext")
    _current_context, _span_key = _span_slot() if _trace is not None else (None, None)
    _loaded = True


def __getattr__(name: str) -> Any:
    if name in _LOADED_NAMES and not _loaded:
        _load()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def capture() -> Optional[str]:
    """The current span's W3C context as stored text, or None when OpenTelemetry is
    absent or no valid span is current (then nothing is stored and the call costs a
    context lookup)."""
    if not _loaded:
        _load()
    if _trace is None:
        return None
    if _current_context is not None:
        span = _current_context.get().get(_span_key)
        if span is None:
            return None
        if not isinstance(span, _trace.Span):  # what get_current_span would not return
            span = _trace.get_current_span()
    else:
        span = _trace.get_current_span()
    context = span.get_span_context()
    if not context.is_valid:
        return None
    # Formatted by hand (json.dumps costs more than the rest): the traceparent is hex
    # and dashes; only a tracestate needs JSON's escaping.
    text = (f'{{"traceparent":"00-{context.trace_id:032x}-{context.span_id:016x}-'
            f'{int(context.trace_flags):02x}"')
    state = context.trace_state.to_header() if context.trace_state else ""
    if state and len(state) <= MAX_TRACESTATE:
        text += ',"tracestate":' + json.dumps(state)
    return text + "}"


class Origin(NamedTuple):
    """A job's stored context, and whether its span is to be the enqueuer's child."""

    stored: str
    child: bool


def origin(stored: Optional[str], relation: str, attempt: int,
           replays: int) -> Optional[Origin]:
    """What the worker's span relates to, or None (no stored context, or ``"none"``)."""
    if stored is None or relation == NONE:
        return None
    return Origin(stored, relation == CHILD and attempt == 1 and replays == 0)


def read_origin(queue: Any, lease: Any) -> Optional[Origin]:
    """The stored context of a leased job and how its span relates to it, read by the
    job's id (one primary-key read, made by the worker only while spans are
    recorded, so that the claim's statements and the schema they need stay as they
    were). A failed read (a database before migration 0011, a dropped connection)
    means no relation: the worker's own statements report the database's state."""
    if queue.options.trace_relation == NONE:
        return None
    try:
        row = queue.db.execute_sql(
            f"SELECT trace_context, replay_count FROM {JOBS_TABLE} WHERE id = "
            f"{queue.db.param}", (lease._id_text(),)).fetchone()
    except peewee.PeeweeException:
        logger.debug("could not read the trace context of job %s", lease.job_id,
                     extra=lease_fields(lease))
        return None
    if row is None:
        return None
    return origin(row[0], queue.options.trace_relation, lease.attempt, int(row[1] or 0))


def _span_context(stored: str) -> Any:
    """The valid span context ``stored`` names, or None (malformed: ignored)."""
    try:
        carrier = json.loads(stored)
    except (TypeError, ValueError):
        carrier = None
    if not isinstance(carrier, dict) or not isinstance(carrier.get("traceparent"), str) \
            or not isinstance(carrier.get("tracestate", ""), str):
        logger.debug("ignoring a malformed stored trace context")
        return None
    extracted = _w3c.TraceContextTextMapPropagator().extract(carrier)
    context = _trace.get_current_span(extracted).get_span_context()
    if not context.is_valid:
        logger.debug("ignoring a malformed stored trace context")
        return None
    return context


def relate(found: Optional[Origin]) -> Tuple[Any, List[Any]]:
    """(parent context, links) for starting the worker's span: the enqueuer as parent
    for a child, as a link otherwise; (None, []) for nothing usable."""
    if not _loaded:
        _load()
    if found is None or _trace is None or _w3c is None:
        return None, []
    context = _span_context(found.stored)
    if context is None:
        return None, []
    if found.child:
        return _trace.set_span_in_context(_trace.NonRecordingSpan(context)), []
    return None, [_trace.Link(context)]
