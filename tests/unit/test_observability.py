"""Spans cost nothing until the application installs a tracer provider."""
from __future__ import annotations

import math

import pytest

from caravel_lite import observability
from caravel_lite.observability import Telemetry


class _Refusing:
    def start_as_current_span(self, *args, **kwargs):
        raise AssertionError("a span was started without a configured tracer provider")


class _Recording:
    def __init__(self) -> None:
        self.names = []

    def start_as_current_span(self, name, **kwargs):
        self.names.append(name)
        return _NullSpan()


class _NullSpan:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def set_attribute(self, key, value):
        pass


@pytest.mark.parametrize("configured", [False, True])
def test_the_global_tracer_is_used_only_once_configured(monkeypatch, configured):
    telemetry = Telemetry()
    tracer = _Recording() if configured else _Refusing()
    monkeypatch.setattr(telemetry, "_tracer", tracer)
    monkeypatch.setattr(observability, "_tracing_configured", lambda: configured)
    with telemetry.span("caravel.queue.process", {"queue": "q"}) as handle:
        handle.set("outcome", "completed")
    if configured:
        assert tracer.names == ["caravel.queue.process"]


def test_an_explicit_tracer_provider_is_always_used(monkeypatch):
    tracer = _Recording()

    class Provider:
        def get_tracer(self, name):
            return tracer

    telemetry = Telemetry(tracer_provider=Provider())
    monkeypatch.setattr(observability, "_tracing_configured", lambda: False)
    with telemetry.span("caravel.queue.process", {"queue": "q"}):
        pass
    assert tracer.names == ["caravel.queue.process"]


def test_a_provider_installed_later_is_noticed_within_the_recheck_interval(monkeypatch):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import ProxyTracerProvider

    now = [1000.0]
    installed = [ProxyTracerProvider()]
    monkeypatch.setattr(observability.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(observability._otel_trace, "get_tracer_provider",
                        lambda: installed[0])
    monkeypatch.setattr(observability, "_tracing_seen", False)
    monkeypatch.setattr(observability, "_tracing_checked_at", -math.inf)
    assert not observability._tracing_configured()
    installed[0] = TracerProvider()
    now[0] += observability.TRACING_RECHECK_SECONDS / 2
    assert not observability._tracing_configured()  # the last answer still holds
    now[0] += observability.TRACING_RECHECK_SECONDS / 2
    assert observability._tracing_configured()
    installed[0] = ProxyTracerProvider()  # cannot happen (set once); the answer stays
    assert observability._tracing_configured()
