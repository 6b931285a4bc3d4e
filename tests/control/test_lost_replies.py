"""Cancel operations whose reply is lost after the server carried them out (a loopback
proxy drops the answer and resets the connection: tests.faults.lossy) recover by
reading the row back: the cancel answers True once, the worker's end of a cancelled
job answers True and leaves it CANCELLED. PostgreSQL and MariaDB (SQLite cannot lose a
reply)."""
from __future__ import annotations

import pytest

from caravel_lite import DatabaseQueue, Dispatch, JobState, QueueOptions
from tests.control.app import QUEUE, TENANT, Quick, registry
from tests.faults.lossy import database_through_proxy

pytestmark = pytest.mark.backends("postgres", "mysql")


@pytest.fixture
def lossy(db_url, backend):
    with database_through_proxy(db_url, backend) as (proxy, app_db):
        yield proxy, DatabaseQueue(app_db, registry, QueueOptions())


def test_a_cancel_whose_reply_is_lost_answers_true(lossy, db):
    proxy, queue = lossy
    direct = DatabaseQueue(db, registry)
    job_id = direct.enqueue(Quick(1), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
    proxy.lose_reply_to(b"cancel_requested_at = CASE")
    assert queue.cancel(job_id, QUEUE, TENANT)
    assert proxy.lost == [b"cancel_requested_at = CASE"]
    assert direct.status(job_id, QUEUE, TENANT).state is JobState.CANCELLED


def test_the_end_of_a_cancelled_job_whose_reply_is_lost_answers_true(lossy, db):
    proxy, queue = lossy
    direct = DatabaseQueue(db, registry)
    job_id = direct.enqueue(Quick(1), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
    lease = queue.claim(QUEUE)
    assert direct.cancel(job_id, QUEUE, TENANT)
    proxy.lose_reply_to(b"SET state = 'cancelled'")
    assert queue.end_cancelled(lease)
    assert proxy.lost == [b"SET state = 'cancelled'"]
    assert direct.status(job_id, QUEUE, TENANT).state is JobState.CANCELLED
