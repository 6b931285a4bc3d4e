"""The renewer: the thread that renews leases and writes acknowledgements that fall due
while the worker's loop is busy.

Every renewal goes through :meth:`Renewer.renew_lease`, the one place a renewal
statement is sent, bounded on the client by what the lease has left
(:func:`caravel_lite.connections.bounded`), so one renewal stuck in a partition or on a
lock does not hold back the other jobs' renewals. Deadlines are the deadline keeper's
(:mod:`~caravel_lite.worker.deadlines`), which never waits on this thread. The renewer
uses one database connection of its own, opened while jobs run and closed when none
does (Peewee connections are per thread).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, List, Optional

from caravel_lite.cancel import POLL_INTERVAL
from caravel_lite.connections import StatementTimedOut, bounded
from caravel_lite.logfields import fields, lease_fields
from caravel_lite.observability import logger
from caravel_lite.progress import write_progress
from caravel_lite.values import QueueLease
from caravel_lite.worker.supervisor import (CANCEL_REQUESTED, LEASE_LOST, SUPERVISOR_TICK,
                                            JobControl, Supervisor, Ticker)

__all__ = ["Renewer", "RENEWAL_RETRY"]

# While riding out an outage, a renewal that failed is tried again this much later.
RENEWAL_RETRY = 1.0


class Renewer(Ticker):
    name = "caravel-renewer"

    def __init__(self, registry: Supervisor, chore: Callable[[], bool]) -> None:
        super().__init__(registry)
        self._chore = chore
        self._used_db = False
        self.ride_out = False
        self._next_poll = 0.0  # monotonic: the next read of cancel requests

    def renew_lease(self, lease: QueueLease) -> Optional[QueueLease]:
        """The one renewal statement of the worker: the renewed lease, or None when it
        was refused (lost, or at ``max_lease_lifetime``). Database errors propagate.

        Bounded on the client (:func:`caravel_lite.connections.bounded`) by the time
        the lease has left, less a tick: a renewal that has not landed by then is of no
        use (the deadline keeper cancels the handler at the deadline), and one stuck in
        a partition that drops packets would otherwise hold this thread, and every other
        job's renewal, for as long as TCP takes to give up. A renewal cut short is fenced
        by its lease: the next one renews or answers None."""
        queue = self._registry.queue
        left = (lease.expires_at - queue.clock()).total_seconds() - SUPERVISOR_TICK
        with bounded(queue.db, max(left, SUPERVISOR_TICK)):
            return queue.renew(lease)

    def tick(self, controls: List[JobControl], stop: Optional[threading.Event]) -> float:
        wait = SUPERVISOR_TICK
        for control in controls:
            if control.next_renewal is None:
                continue
            now = time.monotonic()
            if now >= control.next_renewal:
                self._renew(control)
            if control.next_renewal is not None and control.reason is None:
                wait = min(wait, control.next_renewal - time.monotonic())
        try:
            if self._chore():
                self._used_db = True
        except Exception as exc:  # a database error: the loop meets it too
            self._chore_failed(exc, controls)
        self._poll_cancels(controls)
        self._write_progress(controls)
        return wait

    def _write_progress(self, controls: List[JobControl]) -> None:
        """The progress reports due (changed, a second after the last write)."""
        queue = self._registry.queue
        for control in controls:
            if control.progress is None or control.done:
                continue
            due = control.progress.due()
            if due is None:
                continue
            self._used_db = True
            try:
                with bounded(queue.db, POLL_INTERVAL):
                    write_progress(queue, control.lease, *due)
            except Exception as exc:  # advisory: the next change is written
                self._drop_connection()
                logger.debug("job %s: progress not written (%s)", control.lease.job_id,
                             type(exc).__name__,
                             extra=lease_fields(control.lease, error_type=type(exc).__name__))

    def _poll_cancels(self, controls: List[JobControl]) -> None:
        """Once a second, one read of the cancel requests of every running job (not a
        read per job); a job with one is told to stop (``ctx.cancelled``) and ends
        CANCELLED. Bounded like a renewal; a failed read is tried at the next poll
        (a request is never lost: it stays on the row)."""
        now = time.monotonic()
        watched = {c.lease._id_text(): c for c in controls
                   if not c.done and not c.cancel_requested}
        if not watched:
            self._next_poll = 0.0  # idle: the next running job starts the clock again
            return
        if self._next_poll == 0.0:
            # The first read one interval after jobs began to run, not at once: a job
            # that ends within a second (most jobs, and run_once's) costs no read and
            # opens no connection in this thread; a request is still seen within it.
            self._next_poll = now + POLL_INTERVAL
            return
        if now < self._next_poll:
            return
        self._next_poll = now + POLL_INTERVAL
        queue = self._registry.queue
        self._used_db = True
        try:
            with bounded(queue.db, POLL_INTERVAL):
                requested = queue.cancels.requested(queue.db, watched)
        except Exception as exc:  # a database error: renewals and the loop judge it
            self._drop_connection()
            logger.debug("reading cancel requests failed (%s); retried in %.0f s",
                         type(exc).__name__, POLL_INTERVAL,
                         extra=fields(error_type=type(exc).__name__, component="cancel_poll"))
            return
        for ident in requested:
            control = watched[ident]
            logger.info("job %s: cancel requested; cancelling the handler",
                        control.lease.job_id, extra=lease_fields(control.lease, reason="cancel"))
            control.cancel_requested = True
            control.cancel(CANCEL_REQUESTED)

    def _renew(self, control: JobControl) -> None:
        with control.busy:
            if control.done or control.reason is not None:
                control.next_renewal = None
                return
            self._used_db = True
            current = control.lease
            try:
                renewed = self.renew_lease(current)
            except StatementTimedOut:
                # Not answered within the lease: the lease is as good as lost, not the
                # worker. The deadline keeper cancels the handler at the deadline and
                # nothing is written for it; the loop's own statements meet the
                # database next and judge whether it is down.
                self._drop_connection()
                logger.warning("job %s: lease renewal not answered before its deadline; "
                               "the handler is cancelled then", current.job_id,
                               extra=lease_fields(current))
                control.next_renewal = None
                return
            except Exception as exc:  # a database error
                self._drop_connection()
                if self.ride_out:
                    logger.debug("job %s: renewal failed (%s); retrying",
                                 current.job_id, type(exc).__name__,
                                 extra=lease_fields(current, error_type=type(exc).__name__))
                    control.next_renewal = time.monotonic() + RENEWAL_RETRY
                    return
                control.error = exc
                control.next_renewal = None
                control.cancel(LEASE_LOST)
                return
            if renewed is None:
                logger.warning("job %s: lease renewal refused (lost or at "
                               "max_lease_lifetime); cancelling the handler", current.job_id,
                               extra=lease_fields(current))
                control.next_renewal = None
                control.cancel(LEASE_LOST)
                return
            control.lease = renewed
            period = self._registry.period
            control.next_renewal = time.monotonic() + period if period is not None else None

    def _chore_failed(self, exc: BaseException, controls: List[JobControl]) -> None:
        self._drop_connection()
        if self.ride_out:
            logger.debug("renewer: writing due acknowledgements failed (%s); the worker "
                         "retries", type(exc).__name__,
                         extra=fields(error_type=type(exc).__name__))
            return
        for control in controls:  # a worker fault: stop the jobs, report through one
            with control.busy:
                if control.error is None:
                    control.error = exc
                control.next_renewal = None
                control.cancel(LEASE_LOST)

    def _drop_connection(self) -> None:
        db = self._registry.queue.db
        if not db.in_transaction():
            try:
                db.close()
            except Exception:
                pass

    def idle(self) -> None:
        db = self._registry.queue.db
        if self._used_db and not db.is_closed():
            # This connection was opened here for renewals: never keep it open while no
            # job runs.
            db.close()
        self._used_db = False

    def ended(self) -> None:
        db = self._registry.queue.db
        self._used_db = False
        if not db.is_closed():
            try:
                db.close()
            except Exception:  # a broken connection: it is gone anyway
                pass
