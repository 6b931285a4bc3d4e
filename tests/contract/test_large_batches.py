"""Batches cut by bytes as well as rows (issue #11 item 3). MariaDB refuses a statement
over max_allowed_packet by dropping the connection; enqueue_many cuts its INSERTs below
the limit it reads from the server, and what the server still refuses is a clear error
naming the limit, with nothing written, never ``InterfaceError (0, '')``."""
from __future__ import annotations

import pytest

from caravel_lite.errors import StatementTooLarge
from tests.contract.jobs import QUEUE, Blob, Ping, dispatch, make_queue, row_count

JOB_BYTES = 600 * 1000
JOBS = 40


def _blobs(count: int = JOBS):
    # Distinct payloads of about 600 KB, with quotes that the driver escapes.
    return [(Blob(f'{i:04d}"' + "x" * (JOB_BYTES - 6)), dispatch()) for i in range(count)]


def test_forty_jobs_of_600_kb_in_one_call(db):
    queue = make_queue(db, max_payload_bytes=1024 * 1024)
    results = queue.enqueue_many(_blobs())
    assert len({r.job_id for r in results}) == JOBS
    assert row_count(db) == JOBS
    lengths = db.execute_sql("SELECT LENGTH(payload) FROM caravel_jobs").fetchall()
    assert all(length[0] > JOB_BYTES for length in lengths)
    leases = queue.claim_many(QUEUE, JOBS)
    assert sorted(lease.payload[9:13] for lease in leases) == [f"{i:04d}" for i in range(JOBS)]


@pytest.mark.backends("mysql")
def test_a_statement_the_server_refuses_names_the_limit_and_writes_nothing(db, backend):
    queue = make_queue(db, max_payload_bytes=1024 * 1024)
    real = queue._statement_limit()
    # The queue believes the server takes 64 MiB: one 24 MB statement goes out.
    queue._max_statement_bytes = 64 * 1024 * 1024
    with pytest.raises(StatementTooLarge) as refused:
        queue.enqueue_many(_blobs())
    assert "max_allowed_packet" in str(refused.value)
    assert refused.value.size > real
    # The same Database object carries on, and nothing of the batch was written.
    assert row_count(db) == 0
    queue.enqueue(Ping(1), dispatch())
    assert row_count(db) == 1


@pytest.mark.backends("mysql")
def test_a_row_over_the_limit_is_refused_before_it_is_sent(db, backend):
    queue = make_queue(db, max_payload_bytes=1024 * 1024)
    queue._statement_limit()
    queue._max_statement_bytes = 500 * 1000  # as a server with a small max_allowed_packet
    with pytest.raises(StatementTooLarge) as refused:
        queue.enqueue_many([(Ping(1), dispatch())] + _blobs(1))
    assert "row 1" in str(refused.value) and "max_allowed_packet" in str(refused.value)
    with pytest.raises(StatementTooLarge):
        queue.enqueue(*_blobs(1)[0])
    assert row_count(db) == 0
    queue.enqueue(Ping(2), dispatch())  # the connection was never dropped
    assert row_count(db) == 1
