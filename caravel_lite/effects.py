"""Exactly-once effects for work kept in the queue's own database: ``ctx.transaction()``.

Inside a handler, ``with ctx.transaction() as db:`` opens a transaction on the queue's
database and gives that ``peewee.Database`` (on SQLite ``BEGIN IMMEDIATE``: it holds
the write lock until it ends). The handler's writes in the block, made through it (or
models bound to it) in the same thread, and the job's completion commit together: at the end of the block the
completion runs as one conditional UPDATE fenced by the lease token (the row still
LEASED, the same token, the lease unexpired). If it matches nothing, the lease was lost
(expired, or taken over by another worker): :class:`~caravel_lite.errors.LeaseLost` is
raised, everything in the block is rolled back, and the worker writes nothing more for
that attempt.

The guarantee: if the block committed, the job never runs again; if it did not, none
of its writes exist. A kill -9 after the commit finds the job COMPLETED; one before it
finds nothing written, and the job runs again after its lease expires. A lost reply of
the COMMIT (a server connection dropped) raises the driver's error: the handler fails,
and the failure's fenced write changes nothing if the commit had landed.

What it does not cover: effects outside that database (mail, HTTP, another database);
a transaction held open for long (it holds its locks, on SQLite the whole database's
write lock, and a lease renewal waits behind it: keep the block short, well under the
lease); a kept result (the completion commits before the handler returns, so a job
completed this way keeps none). One block per attempt; it must not be nested in
another transaction on that database (its commit must be the completion's). In an
``async def`` handler, never ``await`` inside the block: the worker's async jobs share
the event loop's thread and so its connection, so while it waits another job's block
is refused as nested and that job's own writes would join this transaction. A block
that ends after the job's timeout is rolled back (``Cancelled``): the attempt fails
with TIMED_OUT.
"""
from __future__ import annotations

import contextlib
import contextvars
from typing import TYPE_CHECKING, Iterator, Optional

import peewee

from caravel_lite.clock import floor_ms
from caravel_lite.errors import LeaseLost
from caravel_lite.values import Cancelled, JobContext, JobState
from caravel_lite.worker.supervisor import LEASE_LOST, TIMED_OUT

if TYPE_CHECKING:
    from caravel_lite.worker.execution import Execution

__all__ = ["transaction", "CURRENT"]

# The execution whose handler runs in this thread (or asyncio task): set by the worker
# around the handler call, so that only the handler's own thread or task can open the
# block (Peewee's connections, and so its transactions, are per thread).
CURRENT: contextvars.ContextVar[Optional["Execution"]] = contextvars.ContextVar(
    "caravel_lite_current_job", default=None)


@contextlib.contextmanager
def transaction(ctx: JobContext) -> Iterator[peewee.Database]:
    """The block of :meth:`JobContext.transaction` (see the module)."""
    execution = CURRENT.get()
    if execution is None or execution.lease.job_id != ctx.job_id:
        raise RuntimeError("ctx.transaction() works only in the job's own handler, in the "
                           "thread or task the worker runs it in")
    if execution.committed:
        raise RuntimeError("this attempt already completed in an earlier ctx.transaction()")
    queue = execution.queue
    db = queue.db
    if db.in_transaction():
        raise RuntimeError("ctx.transaction() cannot be nested in another transaction on "
                           "the queue's database: its commit is the job's completion")
    control = execution.control
    try:
        with queue.dialect.write_transaction(db):
            yield db
            # The lease as the renewer last left it (same token, later expiry).
            lease = control.lease
            now_ms = floor_ms(queue._now_us())
            ident = lease._id_text()
            matched = db.execute_sql(queue._sql.complete,
                                     (now_ms, now_ms, ident, lease._token, now_ms)).rowcount
            if matched != 1:
                raise LeaseLost(f"job {ctx.job_id}: lease no longer owned at the end of "
                                f"ctx.transaction(); its writes were rolled back")
            then = queue._then(lease, JobState.COMPLETED.value, now_ms)
            if then is not None:  # a chain step or batch member (caravel_lite.workflows)
                then()
            if control.reason == TIMED_OUT:
                # Past its timeout the attempt fails (TIMED_OUT), whatever the handler
                # does: its block is rolled back rather than completing the job.
                raise Cancelled(f"job {ctx.job_id} timed out; ctx.transaction() rolled back")
    except LeaseLost:
        control.cancel(LEASE_LOST)  # the worker writes nothing more for this attempt
        raise
    execution.committed = True
    # Completed: nothing left to supervise (a renewal now would be refused and a
    # deadline would cancel a handler whose outcome is settled).
    control.done = True
    queue.telemetry.count("completed", ctx.queue)
