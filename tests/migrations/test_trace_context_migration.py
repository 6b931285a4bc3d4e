"""Migration 0011 (the nullable trace_context column on jobs and outbox intents) in a
rolling deploy: jobs and intents written before it, as the old schema had them, are
claimed, run, relayed and reported after it, with no trace relation and no error even
while spans are recorded; the old code's statements still work against the new
schema; the script can be reverted and applied again."""
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from caravel_lite import JobState, OutboxRelay, QueueWorker, check_schema, migrate
from caravel_lite.dialect import open_database
from caravel_lite.migrator import runner
from caravel_lite.observability import Telemetry
from caravel_lite.outbox import INSERT_COLUMNS as OUTBOX_COLUMNS
from caravel_lite.schema import JOBS_TABLE, OUTBOX_TABLE
from tests.contract.jobs import QUEUE, TENANT, Ping, dispatch, make_queue

BEFORE = "0010_flow_control"  # the last migration of the release before 0011
# The outbox intent's columns as the schema before 0011 had them.
OLD_OUTBOX_COLUMNS = tuple(c for c in OUTBOX_COLUMNS if c not in ("trace_context", "job_options"))


@pytest.fixture
def fresh(new_database):
    db = open_database(new_database())
    db.connect()
    yield db
    db.close()


def _columns(db, table):
    return {c.name for c in db.get_columns(table)}


def test_jobs_and_intents_from_before_0011_run_after_it(fresh):
    runner(fresh).up(BEFORE)
    assert "trace_context" not in _columns(fresh, JOBS_TABLE)
    old = make_queue(fresh, lease_duration=timedelta(seconds=30))
    # The old code's INSERT (no span active: the statement without the column) and
    # its claim statements, before the migration.
    waiting = old.enqueue(Ping(1), dispatch("waiting")).job_id
    leased = old.enqueue(Ping(2), dispatch()).job_id
    held = old.claim(QUEUE)
    assert held.job_id == waiting
    intent = str(uuid.uuid4())
    p = ", ".join([fresh.param] * len(OLD_OUTBOX_COLUMNS))
    fresh.execute_sql(f"INSERT INTO {OUTBOX_TABLE} ({', '.join(OLD_OUTBOX_COLUMNS)}) "
                      f"VALUES ({p})", (intent, QUEUE, TENANT, None, None, "contract.ping.v1",
                                        '{"n":3}', 1, 0, 3, 0))

    assert migrate(fresh)[0] == "0011_trace_context"  # and the migrations after it
    check_schema(fresh)
    assert {"trace_context"} <= _columns(fresh, JOBS_TABLE) & _columns(fresh, OUTBOX_TABLE)

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry = Telemetry(tracer_provider=provider)
    new = make_queue(fresh, lease_duration=timedelta(seconds=30))
    new.telemetry = telemetry
    # The old code's statements against the new schema: its INSERT (without the
    # column) is the statement the new code sends without a span.
    also = old.enqueue(Ping(4), dispatch()).job_id
    assert OutboxRelay(fresh, new).run_once() == 1
    worker = QueueWorker(new, telemetry=telemetry)
    while worker.run_once(QUEUE):
        pass
    spans = exporter.get_finished_spans()
    assert len(spans) == 3 and all(s.parent is None and not s.links for s in spans)
    assert all(s.attributes["outcome"] == "completed" for s in spans)
    for job_id in (leased, also, uuid.UUID(intent)):
        assert new.status(job_id, queue=QUEUE, tenant_id=TENANT).state is JobState.COMPLETED
    # The job leased before the upgrade is still leased, and its old lease completes.
    assert new.status(waiting, queue=QUEUE, tenant_id=TENANT).state is JobState.LEASED
    assert new.complete(held)

    assert runner(fresh).down("0011_trace_context")[-1] == "0011_trace_context"
    assert "trace_context" not in _columns(fresh, JOBS_TABLE)
    assert migrate(fresh)[0] == "0011_trace_context"
