"""The sample's handler: idempotent by job id, strict about what it accepts."""
from __future__ import annotations

import uuid

import pytest

from caravel_lite import Dispatch, Failure, JobContext, JobState, QueueWorker
from caravel_lite.sample import QUEUE, TENANT, RecordQuantity
from caravel_lite.sample.app import SampleApp, SampleRejected, check_job
from caravel_lite.sample.config import SampleConfig

from tests.sample.helpers import target_config


def context(job_id=None, tenant=TENANT, queue=QUEUE, attempt=1) -> JobContext:
    return JobContext(job_id or uuid.uuid4(), queue, tenant, attempt)


@pytest.fixture
def app(backend, tmp_path, new_database):
    sample = SampleApp(target_config(backend, tmp_path, new_database))
    sample.migrate()
    yield sample
    sample.queue_db.close()
    sample.results_db.close()


def test_a_second_run_of_the_same_job_finds_its_row_and_does_not_count_again(app):
    ctx = context()
    app.record_quantity(RecordQuantity(2), ctx)
    app.record_quantity(RecordQuantity(2), context(ctx.job_id, attempt=2))
    assert app.report() == {"events": 1, "total": 2}
    app.record_quantity(RecordQuantity(3), context())
    assert app.report() == {"events": 2, "total": 5}


def test_a_row_that_does_not_match_the_job_is_refused(app):
    ctx = context()
    app.record_quantity(RecordQuantity(1), ctx)
    with pytest.raises(SampleRejected):
        app.record_quantity(RecordQuantity(3), context(ctx.job_id, attempt=2))
    assert app.report() == {"events": 1, "total": 1}


@pytest.mark.parametrize("quantity, ctx", [
    (0, context()), (4, context()), (-1, context()), (True, context()), ("2", context()),
    (2, context(tenant="Synthetic")), (2, context(tenant="synthetic ")),
    (2, context(queue="other-queue")),
])
def test_anything_but_the_samples_tenant_queue_and_quantities_is_rejected(quantity, ctx):
    with pytest.raises(SampleRejected):
        check_job(RecordQuantity(quantity), ctx)


@pytest.mark.parametrize("quantity", [1, 2, 3])
def test_the_samples_own_jobs_are_accepted(quantity):
    check_job(RecordQuantity(quantity), context())


def test_through_the_worker_a_rejected_job_fails_as_handler_failed(tmp_path):
    app = SampleApp(SampleConfig(directory=str(tmp_path)))
    app.migrate()
    bad = app.queue.enqueue(RecordQuantity(7), Dispatch(QUEUE, TENANT, "too-much"))
    assert QueueWorker(app.queue).run_once(QUEUE)
    status = app.queue.status(bad.job_id, QUEUE, TENANT)
    assert (status.state, status.last_failure) == (JobState.PENDING, Failure.HANDLER_FAILED)
    assert app.report() == {"events": 0, "total": 0}
    app.queue_db.close()
    app.results_db.close()
