"""Counters, spans and the logger, through the OpenTelemetry API when it is installed
and as no-ops when it is not. Tags carry only the queue and the failure category:
never a tenant, key, payload or exception text."""
from __future__ import annotations

import contextlib
import importlib
import logging
import math
import time
from typing import Any, ContextManager, Dict, Iterator, Optional

from caravel_lite import tracing

logger = logging.getLogger("caravel_lite")

COUNTERS = ("accepted", "deduplicated", "claimed", "completed", "failed", "retried",
            "deadlettered", "replayed", "lease_lost", "released", "snoozed",
            "cancel_requested", "cancelled")



def _optional(module: str) -> Any:
    """The module, or None where it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:  # pragma: no cover - exercised only where the API is absent
        return None


# OpenTelemetry is optional (extra "otel"); without it every call is a no-op. Its API
# is found when the first Telemetry is built (by the first queue or worker), never at
# import: where it is installed, a process that imports caravel_lite and builds no
# queue would pay for importing it at every start. Until then these names are unbound;
# read from outside the module they are loaded first (__getattr__).
_otel_loaded = False
_otel_metrics: Any
_otel_trace: Any


def _load_otel() -> None:
    global _otel_loaded, _otel_metrics, _otel_trace
    _otel_metrics = _optional("opentelemetry.metrics")
    _otel_trace = _optional("opentelemetry.trace")
    _otel_loaded = True


def __getattr__(name: str) -> Any:
    if name in ("_otel_metrics", "_otel_trace") and not _otel_loaded:
        _load_otel()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Telemetry:
    """The ``caravel.queue.jobs.*`` counters (:data:`COUNTERS`) and the per-job span.

    Instruments come from the meter/tracer providers given, or the global ones at the
    moment this object is built (so tests can install an in-memory reader first).
    """

    def __init__(self, meter_provider: Any = None, tracer_provider: Any = None) -> None:
        if not _otel_loaded:
            _load_otel()
        self._counters: Dict[str, Any] = {}
        self._tracer = None
        if _otel_metrics is not None:
            meter = (meter_provider.get_meter("caravel_lite") if meter_provider is not None
                     else _otel_metrics.get_meter("caravel_lite"))
            for name in COUNTERS:
                self._counters[name] = meter.create_counter(
                    f"caravel.queue.jobs.{name}", unit="{job}")
        self._global_tracer = tracer_provider is None
        if _otel_trace is not None:
            self._tracer = (tracer_provider.get_tracer("caravel_lite") if tracer_provider
                            is not None else _otel_trace.get_tracer("caravel_lite"))

    def count(self, name: str, queue: str, amount: int = 1, failure: Optional[str] = None) -> None:
        """Add to a counter; called only after the database change succeeded."""
        counter = self._counters.get(name)
        if counter is None or amount <= 0:
            return
        tags = {"queue": queue}
        if failure is not None:
            tags["failure"] = failure
        counter.add(amount, tags)

    def span(self, name: str, attributes: Dict[str, Any],
             origin: Any = None) -> ContextManager["SpanHandle"]:
        """A span around one unit of work, yielding a :class:`SpanHandle`; ``origin``
        (a :class:`caravel_lite.tracing.Origin`) makes it the child of, or links it
        to, the span that enqueued the job.

        An exception escaping the span is not recorded on it: the SDK would store the
        exception's message, which may quote a payload or a tenant.
        """
        if not self.tracing():
            # No tracing installed: skip the span machinery altogether (it cost about a
            # third of a fast worker's throughput while recording nothing), down to the
            # generator a context manager function would build for every job.
            return NO_SPAN
        return self._recorded(name, attributes, origin)

    def tracing(self) -> bool:
        """Whether spans are recorded (a tracer provider is installed)."""
        if self._tracer is None:
            return False
        return not self._global_tracer or _tracing_seen or _tracing_configured()

    @contextlib.contextmanager
    def _recorded(self, name: str, attributes: Dict[str, Any],
                  origin: Any) -> Iterator["SpanHandle"]:
        assert self._tracer is not None
        parent, links = tracing.relate(origin)
        with self._tracer.start_as_current_span(name, context=parent, links=links,
                                                attributes=attributes,
                                                record_exception=False,
                                                set_status_on_exception=False) as span:
            yield SpanHandle(span)


class SpanHandle:
    """The few things caravel_lite records on a span; a no-op without a tracer."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: Any) -> None:
        if self._span is not None:
            self._span.set_attribute(key, value)

    def error(self) -> None:
        """Mark the span failed, with no description (a description would be text)."""
        if self._span is not None and _otel_trace is not None:
            self._span.set_status(_otel_trace.Status(_otel_trace.StatusCode.ERROR))


class _NoSpan:
    """The span of work done while nothing traces: one shared object, nothing recorded."""

    _handle = SpanHandle(None)

    def __enter__(self) -> SpanHandle:
        return self._handle

    def __exit__(self, *exc: Any) -> None:
        return None


NO_SPAN = _NoSpan()


# The global tracer provider can be installed only once, so a "configured" answer is
# kept for good; a "not configured" one is read again at most this often (reading it
# looks up an environment variable, a noticeable cost on every job of a fast worker).
TRACING_RECHECK_SECONDS = 1.0
_tracing_seen = False
_tracing_checked_at = -math.inf


def _tracing_configured() -> bool:
    """True once the application installed a real global tracer provider (until then
    the API hands out a proxy whose spans record nothing). A provider installed while
    a worker runs is used from at most TRACING_RECHECK_SECONDS later."""
    global _tracing_seen, _tracing_checked_at
    if _tracing_seen:
        return True
    now = time.monotonic()
    if now - _tracing_checked_at < TRACING_RECHECK_SECONDS:
        return False
    _tracing_checked_at = now
    provider = _otel_trace.get_tracer_provider()
    _tracing_seen = not isinstance(provider, (_otel_trace.ProxyTracerProvider,
                                              _otel_trace.NoOpTracerProvider))
    return _tracing_seen


_default: Optional[Telemetry] = None


def default_telemetry() -> Telemetry:
    """A process-wide Telemetry built lazily on first use (never at import)."""
    global _default
    if _default is None:
        _default = Telemetry()
    return _default
