"""Counters and spans of a scripted scenario: exact totals, and no attribute carrying a
tenant, key, payload or exception text (nor any log record)."""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta

import peewee
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from caravel_lite import DatabaseQueue, Dispatch, JobContext, JobRegistry, QueueWorker
from caravel_lite.observability import Telemetry
from caravel_lite.testing import ManualClock

from tests.worker.helpers import QUEUE, enqueue, options, raising

TENANT = "tenant-secret-7"
KEY = "key-secret-9"
SECRET = "payload-secret-3"
MESSAGE = "exception-secret-5"


@dataclass(frozen=True)
class Note:
    text: str


@dataclass(frozen=True)
class Boom:
    text: str


@dataclass(frozen=True)
class Slow:
    text: str


@dataclass(frozen=True)
class Ghost:
    text: str


def _registry(clock: ManualClock, with_ghost: bool) -> JobRegistry:
    registry = JobRegistry()
    registry.register("tests.note.v1", Note, lambda job, ctx: None)

    def boom(job: Boom, ctx: JobContext) -> None:
        raise ValueError(f"{MESSAGE} {job.text}")

    def slow(job: Slow, ctx: JobContext) -> None:
        clock.advance(timedelta(seconds=5))  # the 2 s lease runs out under the handler

    registry.register("tests.boom.v1", Boom, boom)
    registry.register("tests.slow.v1", Slow, slow)
    if with_ghost:
        registry.register("tests.ghost.v1", Ghost, lambda job, ctx: None)
    return registry


def test_a_scripted_scenario_counts_exactly(db, caplog):
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(meter_provider=MeterProvider(metric_readers=[reader]),
                          tracer_provider=tracer_provider)
    clock = ManualClock()

    producer = DatabaseQueue(db, _registry(clock, with_ghost=True),
                             options(max_attempts=2), clock=clock, telemetry=telemetry)

    def put(job, key=None):
        producer.enqueue(job, Dispatch(queue=QUEUE, tenant_id=TENANT, idempotency_key=key))

    put(Note(SECRET), key=KEY)
    put(Note(SECRET), key=KEY)  # deduplicated
    put(Boom(SECRET))
    put(Ghost(SECRET))
    put(Note(SECRET + "x" * 600))  # over the worker queue's 512-byte limit
    put(Slow(SECRET))

    queue = DatabaseQueue(db, _registry(clock, with_ghost=False),
                          options(max_payload_bytes=512, retry_delay=timedelta(seconds=1)),
                          clock=clock, telemetry=telemetry)
    worker = QueueWorker(queue, telemetry=telemetry)
    caplog.set_level(logging.DEBUG, logger="caravel_lite")
    for _ in range(4):  # every retry comes due, every expired lease is swept
        while worker.run_once(QUEUE):
            pass
        clock.advance(timedelta(minutes=1))

    totals: Counter = Counter()
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    attributes = dict(point.attributes)
                    assert set(attributes) <= {"queue", "failure"}
                    assert attributes["queue"] == QUEUE
                    name = metric.name.removeprefix("caravel.queue.jobs.")
                    totals[(name, attributes.get("failure"))] += point.value
    totals = +totals  # drop zero entries
    assert totals == Counter({
        ("accepted", None): 5,
        ("deduplicated", None): 1,
        # note 1; boom, ghost, big note 2 each; slow 2 (both leases lost)
        ("claimed", None): 9,
        ("completed", None): 1,
        ("failed", "handler_failed"): 2,
        ("failed", "unknown_job_type"): 2,
        ("failed", "invalid_payload"): 2,
        ("retried", "handler_failed"): 1,
        ("retried", "unknown_job_type"): 1,
        ("retried", "invalid_payload"): 1,
        ("deadlettered", "handler_failed"): 1,
        ("deadlettered", "unknown_job_type"): 1,
        ("deadlettered", "invalid_payload"): 1,
        ("deadlettered", "attempts_exhausted"): 1,  # the slow job, swept
        ("lease_lost", None): 2,
    })

    spans = exporter.get_finished_spans()
    assert {span.name for span in spans} == {"caravel.queue.process"}
    assert Counter(span.attributes["outcome"] for span in spans) == Counter(
        {"completed": 1, "failed": 6, "lease_lost": 2})
    assert Counter(span.attributes["wire_name"] for span in spans) == Counter(
        {"tests.note.v1": 3, "tests.boom.v1": 2, "tests.ghost.v1": 2, "tests.slow.v1": 2})
    for span in spans:
        assert set(span.attributes) == {"queue", "job_id", "wire_name", "outcome"}
        assert not span.events
        assert not span.status.description

    text = " ".join([repr(spans), repr(reader.get_metrics_data())]
                    + [record.getMessage() for record in caplog.records])
    for secret in (TENANT, KEY, SECRET, MESSAGE):
        assert secret not in text
    assert any("ValueError" in record.getMessage() and record.levelno == logging.WARNING
               for record in caplog.records)


def test_an_infrastructure_error_ends_the_span_as_such(db):
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=tracer_provider)
    registry = JobRegistry()
    registry.register("tests.note.v1", Note, lambda job, ctx: None)
    enqueue(DatabaseQueue(db, registry, options()), Note(SECRET))
    broken = raising("complete")(db, registry, options(), telemetry=telemetry)
    with pytest.raises(peewee.OperationalError):
        QueueWorker(broken).run_once(QUEUE)
    (span,) = exporter.get_finished_spans()
    assert span.attributes["outcome"] == "infrastructure_error"
    assert not span.events and "simulated" not in repr(span.to_json())
