"""The queue's statements as the code before migration 0008 built them: no
``job_options`` column written or read. Tests of earlier migrations run the queue on
schemas from before 0008 through this, and the rolling-upgrade test of 0008 uses it
for the old code running against the new schema."""
from __future__ import annotations

import contextlib
from typing import Iterator
from unittest import mock

from caravel_lite import enqueue, statements
from caravel_lite.claim import CANDIDATES, Claimer
from caravel_lite.queue import DatabaseQueue

# Frozen as the code before 0008 had them.
JOB_COLUMNS = ("id", "queue", "tenant_id", "idempotency_key", "dedup_key", "wire_name",
               "payload", "priority", "available_at", "max_attempts", "state",
               "enqueued_at", "attempts", "renewals", "replay_count", "updated_at")
LEASE_COLUMNS = ("id, attempts, tenant_id, wire_name, payload, max_attempts, "
                 "priority, available_at, enqueued_at")
_row = enqueue._row


def _rebuild(queue: DatabaseQueue) -> None:
    queue._sql = statements.Statements.build(queue.db, CANDIDATES)
    queue._batch = statements.BatchStatements(queue.db, queue.dialect.claim_lock,
                                               queue.dialect.picked_ids, queue.dialect.listed)
    queue._claimer = Claimer(queue.db, queue.dialect, queue._sql, queue._batch,
                             queue.telemetry)


@contextlib.contextmanager
def code_before_0008(queue: DatabaseQueue) -> Iterator[DatabaseQueue]:
    """``queue`` writing and claiming exactly the columns the old code did (its leases
    get no stored options, as the old code had none) until the block ends."""
    try:
        with mock.patch.object(statements, "JOB_COLUMNS", JOB_COLUMNS), \
                mock.patch.object(enqueue, "JOB_COLUMNS", JOB_COLUMNS), \
                mock.patch.object(statements, "LEASE_COLUMNS", LEASE_COLUMNS + ", NULL"), \
                mock.patch.object(enqueue, "_row", lambda *args: _row(*args)[:-1]):
            _rebuild(queue)
            yield queue
    finally:
        _rebuild(queue)  # the current code's statements again
