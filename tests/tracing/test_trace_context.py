"""W3C trace context stored with jobs and the worker's span related to it (issue 28,
caravel_lite.tracing), recorded with the SDK's in-memory exporter on every database:
each trace_relation, enqueue_many, the outbox through the relay, the scheduler, a
retry and a replay, and stored values that are not what the queue writes."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Iterator, List, Optional, Tuple

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace import use_span

from caravel_lite import (DatabaseQueue, Dispatch, Failure, JobContext, JobRegistry,
                          OutboxRelay, QueueOptions, QueueOutbox, QueueScheduler,
                          QueueWorker, tracing)
from caravel_lite.observability import Telemetry
from caravel_lite.testing import ManualClock

QUEUE = "traced"
TENANT = "tenant-a"
PROCESS = "caravel.queue.process"


@dataclass(frozen=True)
class Work:
    n: int


class Traced:
    """A tracer provider with an in-memory exporter, a queue and a worker using it."""

    def __init__(self, db: Any, relation: str = "child", fail_first: int = 0,
                 max_attempts: int = 3) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")
        self.clock = ManualClock()
        self.failures_left = fail_first
        registry = JobRegistry()
        registry.register("tests.work.v1", Work, self._handle)
        self.telemetry = Telemetry(tracer_provider=self.provider)
        self.queue = DatabaseQueue(db, registry, QueueOptions(
            trace_relation=relation, max_attempts=max_attempts,
            retry_delay=timedelta(seconds=1)), clock=self.clock, telemetry=self.telemetry)
        self.worker = QueueWorker(self.queue, telemetry=self.telemetry)

    def _handle(self, job: Work, ctx: JobContext) -> None:
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("try again")

    def request(self) -> Iterator[Any]:
        return self.tracer.start_as_current_span("request")  # type: ignore[no-any-return]

    def enqueue(self, n: int = 1) -> Tuple[Any, Any]:
        """Enqueue inside a request span: (the request span's context, the job id)."""
        with self.request() as span:
            job_id = self.queue.enqueue(Work(n), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
        return span.get_span_context(), job_id

    def drain(self) -> List[ReadableSpan]:
        """Run every due job; the job spans finished meanwhile."""
        self.exporter.clear()
        while self.worker.run_once(QUEUE):
            pass
        return [s for s in self.exporter.get_finished_spans() if s.name == PROCESS]


def _stored(db: Any, job_id: Any) -> Optional[str]:
    return db.execute_sql(f"SELECT trace_context FROM caravel_jobs WHERE id = {db.param}",
                          (str(job_id),)).fetchone()[0]


def assert_child(span: ReadableSpan, request: SpanContext) -> None:
    assert span.parent is not None and span.parent.span_id == request.span_id
    assert span.context.trace_id == request.trace_id
    assert not span.links


def assert_linked(span: ReadableSpan, request: SpanContext) -> None:
    assert span.parent is None and span.context.trace_id != request.trace_id
    (link,) = span.links
    assert (link.context.trace_id, link.context.span_id) == (request.trace_id,
                                                             request.span_id)


def assert_unrelated(span: ReadableSpan, request: Optional[SpanContext] = None) -> None:
    assert span.parent is None and not span.links
    if request is not None:
        assert span.context.trace_id != request.trace_id


@pytest.mark.parametrize("relation", ["child", "link", "none"])
def test_each_relation_relates_the_job_span_to_the_enqueuing_request(db, relation):
    traced = Traced(db, relation)
    request, job_id = traced.enqueue()
    stored = _stored(db, job_id)
    assert stored == ('{"traceparent":"00-%032x-%016x-%02x"}'
                      % (request.trace_id, request.span_id, int(request.trace_flags)))
    (span,) = traced.drain()
    assert span.attributes["outcome"] == "completed"
    {"child": assert_child, "link": assert_linked,
     "none": assert_unrelated}[relation](span, request)


def test_the_default_is_child_for_the_first_run_then_a_link_for_a_retry_and_a_replay(db):
    """awa's rule: the first attempt in the request's trace; a retry (attempt 2) and a
    replay (attempt 1 again, replay_count 1) start their own traces linked to it."""
    assert QueueOptions().trace_relation == "child"
    traced = Traced(db, fail_first=3, max_attempts=2)
    request, job_id = traced.enqueue()
    (first,) = traced.drain()
    assert first.attributes["outcome"] == "failed"
    assert_child(first, request)
    traced.clock.advance(timedelta(seconds=2))
    (retry,) = traced.drain()
    assert_linked(retry, request)
    status = traced.queue.status(job_id, queue=QUEUE, tenant_id=TENANT)
    assert status is not None and status.last_failure is Failure.HANDLER_FAILED
    assert traced.queue.replay(job_id, queue=QUEUE, tenant_id=TENANT)
    (replayed,) = traced.drain()
    assert replayed.attributes["outcome"] == "failed"
    assert_linked(replayed, request)


def test_enqueue_many_stores_the_request_with_every_job(db):
    traced = Traced(db)
    with traced.request() as span:
        results = traced.queue.enqueue_many(
            [(Work(n), Dispatch(queue=QUEUE, tenant_id=TENANT)) for n in range(3)])
    assert all(_stored(db, r.job_id) is not None for r in results)
    spans = traced.drain()
    assert len(spans) == 3
    for job_span in spans:
        assert_child(job_span, span.get_span_context())


def test_without_an_active_span_nothing_is_stored_and_the_span_is_a_root(db):
    traced = Traced(db)
    job_id = traced.queue.enqueue(Work(1), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
    batch = traced.queue.enqueue_many([(Work(2), Dispatch(queue=QUEUE, tenant_id=TENANT))])
    assert _stored(db, job_id) is None and _stored(db, batch[0].job_id) is None
    for span in traced.drain():
        assert_unrelated(span)


def test_the_outbox_carries_the_request_through_the_relay(db):
    traced = Traced(db)
    outbox = QueueOutbox(db, traced.queue.registry, clock=traced.clock)
    with traced.request() as span:
        with db.atomic():
            staged = outbox.stage(Work(1), Dispatch(queue=QUEUE, tenant_id=TENANT))
    # The relay runs later, in no span: the intent's context is what it copies.
    assert OutboxRelay(db, traced.queue).run_once() == 1
    assert _stored(db, staged.outbox_id) is not None
    (job_span,) = traced.drain()
    assert_child(job_span, span.get_span_context())


def test_a_scheduled_job_is_a_child_of_the_scheduler_pass_that_enqueued_it(db):
    traced = Traced(db)
    scheduler = QueueScheduler(traced.queue)
    scheduler.every("tick", timedelta(minutes=1), Work(1), queue=QUEUE, tenant_id=TENANT)
    traced.exporter.clear()
    assert scheduler.run_once() == 1
    (pass_span,) = [s for s in traced.exporter.get_finished_spans()
                    if s.name == "caravel.schedule.enqueue"]
    assert pass_span.attributes["schedule"] == "tick"
    (job_span,) = traced.drain()
    assert_child(job_span, pass_span.context)


def test_tracestate_is_kept_and_a_remote_parent_is_continued(db):
    """A request continuing a remote caller's trace (a span context with tracestate)
    passes both on."""
    traced = Traced(db)
    remote = SpanContext(0x1234, 0x5678, is_remote=True, trace_flags=TraceFlags(1),
                         trace_state=TraceState([("vendor", "value")]))
    with use_span(NonRecordingSpan(remote)):
        job_id = traced.queue.enqueue(Work(1), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
    assert _stored(db, job_id) == (
        '{"traceparent":"00-%032x-%016x-01","tracestate":"vendor=value"}' % (0x1234, 0x5678))
    (span,) = traced.drain()
    assert span.parent.span_id == 0x5678 and span.context.trace_state.get("vendor") == "value"


MALFORMED = ["not json", "[]", "{}", '{"traceparent": 5}',
             '{"traceparent": "00-zz-yy-01"}',
             '{"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}',
             '{"traceparent": "00-%032x-%016x-01", "tracestate": 7}' % (1, 2)]


@pytest.mark.parametrize("relation", ["child", "link"])
def test_a_malformed_stored_context_is_ignored(db, relation):
    traced = Traced(db, relation)
    ids = [traced.queue.enqueue(Work(n), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
           for n in range(len(MALFORMED))]
    for job_id, text in zip(ids, MALFORMED):
        db.execute_sql(f"UPDATE caravel_jobs SET trace_context = {db.param} "
                       f"WHERE id = {db.param}", (text, str(job_id)))
    spans = traced.drain()
    assert len(spans) == len(MALFORMED)
    for span in spans:
        assert span.attributes["outcome"] == "completed"
        assert_unrelated(span)


def test_capture_stores_nothing_without_opentelemetry(monkeypatch):
    monkeypatch.setattr(tracing, "_trace", None)
    assert tracing.capture() is None
    assert tracing.relate(tracing.Origin('{"traceparent": "x"}', True)) == (None, [])


def test_a_tracestate_over_the_limit_is_left_out():
    provider = TracerProvider()
    long_state = TraceState([("k", "v" * (tracing.MAX_TRACESTATE + 1))])
    parent = SpanContext(1, 2, is_remote=True, trace_flags=TraceFlags(1),
                         trace_state=long_state)
    with use_span(NonRecordingSpan(parent)):
        assert tracing.capture() == '{"traceparent":"00-%032x-%016x-01"}' % (1, 2)
    with provider.get_tracer("t").start_as_current_span("s"):
        assert tracing.capture() is not None


def test_trace_relation_is_validated():
    with pytest.raises(ValueError, match="trace_relation"):
        QueueOptions(trace_relation="parent")


def test_the_direct_read_of_the_current_span_answers_as_the_public_api(monkeypatch):
    # capture() reads OpenTelemetry's context variable directly; where it cannot
    # (another runtime context), it asks get_current_span(): the same answers.
    assert tracing._current_context is not None  # the direct read is in use here
    provider = TracerProvider()
    state = TraceState([("k", "v")])
    remote = NonRecordingSpan(SpanContext(3, 4, is_remote=True, trace_flags=TraceFlags(1),
                                          trace_state=state))
    invalid = NonRecordingSpan(SpanContext(0, 0, is_remote=False))

    def answers() -> List[Optional[str]]:
        found = [tracing.capture()]
        for span in (remote, invalid):
            with use_span(span):
                found.append(tracing.capture())
        with provider.get_tracer("t").start_as_current_span("s") as current:
            context = current.get_span_context()
            found.append(tracing.capture())
            assert found[-1] == ('{"traceparent":"00-%032x-%016x-%02x"}'
                                 % (context.trace_id, context.span_id,
                                    int(context.trace_flags)))
        return found

    direct = answers()
    assert direct[0] is None and direct[2] is None
    assert direct[1] == '{"traceparent":"00-%032x-%016x-01","tracestate":"k=v"}' % (3, 4)
    monkeypatch.setattr(tracing, "_current_context", None)
    public = answers()
    assert public[:3] == direct[:3]
    assert public[3] is not None and public[3] != direct[3]  # another span, same shape


def test_a_value_under_the_span_key_that_is_no_span_stores_nothing():
    # What get_current_span() answers for it (no valid span), not an AttributeError
    # from every enqueue.
    from opentelemetry import context as otel_context
    from opentelemetry.trace.propagation import _SPAN_KEY

    token = otel_context.attach(otel_context.set_value(_SPAN_KEY, "not a span"))
    try:
        assert tracing.capture() is None
    finally:
        otel_context.detach(token)
