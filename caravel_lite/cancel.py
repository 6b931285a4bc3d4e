"""Cancelling jobs: the CANCELLED state and cancel requests (migration 0009).

- A PENDING job (waiting or delayed) becomes CANCELLED at once: a final state, never
  claimed, kept with its idempotency key, replayable like a dead letter.
- A LEASED job gets a cancel request (``cancel_requested_at``). The worker running it
  reads the requests of all its running jobs in one statement a second
  (:data:`POLL_INTERVAL`, :meth:`CancelStatements.requested`: one read per worker, not
  per job), sets ``ctx.cancelled`` (an async handler's task is cancelled) and, whatever
  the handler then does, ends the job CANCELLED (:meth:`Cancelling.end_cancelled`).
- A request the worker never saw is still honoured: the lease operations that would
  run the job again (retry after a failure, hand-back, snooze, the sweep of an expired
  lease) or dead-letter it (a replay of the dead letters would run it) do not match a
  row with a request, and the job ends CANCELLED instead. A
  worker that is gone leaves its lease to expire; the sweep then ends it CANCELLED.
  Only a completion is not held back: a handler that succeeded before its worker saw
  the request leaves the job COMPLETED (the work was done).

Every change is one conditional statement on the row (its state decides), so a cancel
racing a claim, a completion or another cancel has one outcome.
"""
from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, Set, Union

import peewee

from caravel_lite import validation
from caravel_lite.clock import floor_ms, now_micros
from caravel_lite.fences import fenced_write, left_as
from caravel_lite.retry import recovering
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import JobState, QueueLease
from caravel_lite.workflows.operator import end_member

if TYPE_CHECKING:
    from caravel_lite.clock import Clock
    from caravel_lite.dialect import Dialect
    from caravel_lite.observability import Telemetry

__all__ = ["CancelStatements", "Cancelling", "POLL_INTERVAL", "POLL_BATCH"]

CANCELLED = JobState.CANCELLED.value
PENDING = JobState.PENDING.value
LEASED = JobState.LEASED.value
# How often a worker reads the cancel requests of the jobs it runs (seconds).
POLL_INTERVAL = 1.0
# Ids per read of the cancel requests (well under every database's parameter limit).
POLL_BATCH = 500

# A pending job is cancelled, a leased one gets a request (kept if already there).
# MariaDB evaluates SET assignments left to right with the values already assigned, so
# ``state`` comes last: every CASE before it reads the row's state before the change.
# Params: now_ms (finished), now_ms (requested), now_ms (updated).
_SET = (f"SET finished_at = CASE WHEN state = '{PENDING}' THEN {{p}} ELSE finished_at END, "
        f"cancel_requested_at = CASE WHEN state = '{LEASED}' "
        f"THEN COALESCE(cancel_requested_at, {{p}}) ELSE cancel_requested_at END, "
        f"updated_at = {{p}}, "
        f"state = CASE WHEN state = '{PENDING}' THEN '{CANCELLED}' ELSE state END")


class CancelStatements:
    """The cancel statements of one database, built once."""

    def __init__(self, db: peewee.Database) -> None:
        p = db.param
        t = JOBS_TABLE
        live = f"state IN ('{PENDING}', '{LEASED}')"
        # now_ms x3, id
        self.one = f"UPDATE {t} {_SET.format(p=p)} WHERE id = {p} AND {live}"
        # now_ms x3, id, queue, tenant
        self.scoped = (f"UPDATE {t} {_SET.format(p=p)} WHERE id = {p} AND {live} "
                       f"AND queue = {p} AND tenant_id = {p}")
        # now_ms x3, then "id IN (...) AND <filter>" (QueueAdmin.cancel_many)
        self.many = f"UPDATE {t} {_SET.format(p=p)} WHERE"
        # What a cancel whose reply was lost left. id
        # (and its stored options: a batch member's cancel counts in its batch)
        self.settled = (f"SELECT state, cancel_requested_at, queue, tenant_id, job_options "
                        f"FROM {t} WHERE id = {p}")
        # A pending batch member cancelled with its batch's count. now_ms x2, id
        self.pending_member = (f"UPDATE {t} SET state = '{CANCELLED}', finished_at = {p}, "
                               f"updated_at = {p} WHERE id = {p} AND state = '{PENDING}'")
        # An owned lease with a request ends CANCELLED. now_ms (finished), now_ms
        # (updated), id, token, now_ms
        self.end = (
            f"UPDATE {t} SET state = '{CANCELLED}', lease_token = NULL, "
            f"lease_expires_at = NULL, finished_at = {p}, updated_at = {p} "
            f"WHERE id = {p} AND state = '{LEASED}' AND lease_token = {p} "
            f"AND lease_expires_at > {p} AND cancel_requested_at IS NOT NULL")
        self._p = p
        self._settled_lease = (f"SELECT state, lease_token, lease_expires_at, updated_at, "
                               f"claimed_at, attempts, last_failure FROM {t} WHERE id = {p}")

    def requested_sql(self, n: int) -> str:
        """Which of n leased jobs have a cancel request. Params: *ids."""
        return (f"SELECT id FROM {JOBS_TABLE} WHERE id IN ({', '.join([self._p] * n)}) "
                f"AND cancel_requested_at IS NOT NULL")

    def requested(self, db: peewee.Database, ids: Iterable[str]) -> Set[str]:
        """The ids among ``ids`` whose jobs have a cancel request: one primary-key read
        per :data:`POLL_BATCH` ids."""
        ids = list(ids)
        found: Set[str] = set()
        for start in range(0, len(ids), POLL_BATCH):
            chunk = ids[start:start + POLL_BATCH]
            found.update(row[0] for row in db.execute_sql(self.requested_sql(len(chunk)),
                                                           chunk).fetchall())
        return found


def was_cancelled(row: Optional[Any]) -> bool:
    """A row (CancelStatements.settled) that a cancel left cancelled or requested."""
    return row is not None and (row[0] == CANCELLED
                                or (row[0] == LEASED and row[1] is not None))


def cancel_one(db: peewee.Database, dialect: "Dialect", sql: str, settled: str,
               params: List[Any], ident: str) -> bool:
    """Run one cancel statement; a lost reply is answered by reading the row back (a
    job cancelled or with a request: True), never by trusting a repeat's count."""
    def run() -> bool:
        return int(db.execute_sql(sql, params).rowcount) == 1

    def recover() -> bool:
        return was_cancelled(db.execute_sql(settled, (ident,)).fetchone()) or run()

    return recovering(dialect, db, run, recover)


class Cancelling:
    """``cancel`` for application code and the worker's end of a cancelled job, mixed
    into :class:`~caravel_lite.DatabaseQueue`."""

    # Set by DatabaseQueue.__init__; declared here for type checkers.
    db: peewee.Database
    dialect: "Dialect"
    clock: "Clock"
    telemetry: "Telemetry"
    _cancels: Optional[CancelStatements] = None

    if TYPE_CHECKING:  # caravel_lite.workflows.calls.WorkflowCalls'
        def _then(self, lease: QueueLease, state: str,
                  now_ms: int) -> Optional[Callable[[], None]]: ...

    @property
    def cancels(self) -> CancelStatements:
        if self._cancels is None:
            self._cancels = CancelStatements(self.db)
        return self._cancels

    def cancel(self, job_id: Union[uuid.UUID, str], queue_name: str, tenant_id: str) -> bool:
        """Cancel one job of ``tenant_id`` in ``queue_name`` (exact match). A PENDING or
        delayed job becomes CANCELLED at once; a LEASED one gets a cancel request, which
        its worker sees within a second and ends CANCELLED (a gone worker's job ends
        CANCELLED when its lease expires; a handler that already succeeded leaves it
        COMPLETED). True when the job is cancelled or will be; False for a finished
        job, another tenant or queue, or an unknown id. May be repeated; a lost reply
        is settled by reading the row back."""
        ident = validation.check_uuid("job_id", job_id)
        validation.check_queue(queue_name, "queue_name")
        validation.check_identity("tenant_id", tenant_id)
        now_ms = floor_ms(now_micros(self.clock))
        sql = self.cancels
        row = self.db.execute_sql(sql.settled, (ident,)).fetchone()
        # The tenant and queue compare exactly here too (a collation may not).
        if row is None or row[2] != queue_name or row[3] != tenant_id:
            return False
        # A pending batch member is cancelled with its batch's count.
        if row[0] == PENDING and end_member(self.db, self.dialect, row[4], ident,
                                            sql.pending_member, (now_ms, now_ms, ident),
                                            CANCELLED, now_ms):
            done = True
        else:
            done = cancel_one(self.db, self.dialect, sql.scoped, sql.settled,
                              [now_ms, now_ms, now_ms, ident, queue_name, tenant_id], ident)
        if done:
            self.telemetry.count("cancel_requested", queue_name)
        return done

    def end_cancelled(self, lease: QueueLease) -> bool:
        """End an owned lease whose job has a cancel request: CANCELLED, lease cleared.
        False (nothing changed) when the lease is not owned or there is no request.
        Fenced by the lease, so it may be repeated; a lost reply reads the row back."""
        now_ms = floor_ms(now_micros(self.clock))
        ident = lease._id_text()
        sql = self.cancels
        done = fenced_write(self.dialect, self.db, sql.end,
                            (now_ms, now_ms, ident, lease._token, now_ms),
                            sql._settled_lease, ident,
                            left_as(CANCELLED, now_ms, lease, lease.attempt),
                            self._then(lease, CANCELLED, now_ms)) == 1
        if done:
            self.telemetry.count("cancelled", lease.context.queue)
        return done
