"""Turning a job's decided outcome into its write, and judging whether a leased job may
still start. Used by the thread that owns the job at that moment: the worker's loop
(``run``), or the calling thread (``run_once``)."""
from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Optional

from caravel_lite import tracing
from caravel_lite.logfields import lease_fields
from caravel_lite.observability import Telemetry, logger
from caravel_lite.values import QueueLease
from caravel_lite.worker.acks import Acknowledgements
from caravel_lite.worker.execution import (SPAN_NAME, Execution, Outcome, Settlement,
                                           prepare, span_attributes)

if TYPE_CHECKING:
    from caravel_lite.queue import DatabaseQueue

__all__ = ["Settler"]


class Settler:
    """Admits leased jobs (is there lease enough left to start it? does it decode?) and
    writes outcomes through :class:`Acknowledgements` (each fenced by the job's lease).

    A waiting job is never started once its lease has less than ``stale_margin`` (half
    of ``lease_duration``) left: it is handed back, attempt given back."""

    def __init__(self, queue: DatabaseQueue, acks: Acknowledgements, telemetry: Telemetry) -> None:
        self.queue = queue
        self.acks = acks
        self.telemetry = telemetry
        self.clock = queue.clock
        self.stale_margin: timedelta = queue.options.lease_duration / 2
        self.stopping = False  # the run is ending (only changes what is logged)

    def too_old(self, lease: QueueLease) -> Optional[Settlement]:
        """None when the job may start now; else what to do instead (hand it back, or
        nothing at all when its lease already ran out). Reads the clock only."""
        remaining = lease.expires_at - self.clock()
        if remaining <= timedelta(0):
            return Settlement(Outcome.LEASE_LOST, why="lease expired before the handler started")
        if remaining < self.stale_margin:
            return Settlement(Outcome.RELEASED)
        return None

    def admit(self, lease: QueueLease, batch: bool, *,
              judged: bool = False) -> Optional[Execution]:
        """A waiting job about to start: an Execution, or None when it was settled here
        (expired, handed back because too old, or failed without a handler).
        ``judged``: the caller has just handed back every waiting job too old to
        start (the worker's loop, in the same pass), so the age is not read again."""
        if not judged:
            old = self.too_old(lease)
            if old is not None:
                self.settle(lease, old, batch)
                return None
        prepared = prepare(lease, self.queue)
        traced = self.telemetry.tracing()
        origin = tracing.read_origin(self.queue, lease) if traced else None
        if isinstance(prepared, Execution):
            prepared.origin, prepared.traced = origin, traced
            return prepared
        with self.telemetry.span(SPAN_NAME, span_attributes(lease), origin) as span:
            span.set("outcome", prepared.outcome.value)
            span.error()
            self.settle(lease, prepared, batch)
        return None

    def settle(self, lease: QueueLease, settlement: Optional[Settlement], batch: bool) -> None:
        """Write one job's outcome (the acknowledgements are fenced by its lease). A
        renewal's database error (``INFRASTRUCTURE_ERROR``) is raised here, after the
        job's outcome (nothing written) is logged."""
        assert settlement is not None
        outcome = settlement.outcome
        acks = self.acks
        if outcome is Outcome.COMPLETED:
            if self.stopping or lease.context.cancelled.is_set():
                logger.info("job %s on queue %s returned while the worker was stopping; "
                            "acknowledging it as completed", lease.job_id, lease.context.queue,
                            extra=lease_fields(lease))
            if settlement.result is not None:  # kept: written at once, with its value
                acks.complete_with_result(lease, settlement.result)
            elif batch:
                acks.complete_later(lease)
            else:
                acks.complete_now(lease)
        elif outcome is Outcome.COMMITTED:
            logger.info("job %s on queue %s completed in its handler's transaction "
                        "(attempt %d)", lease.job_id, lease.context.queue, lease.attempt,
                        extra=lease_fields(lease))
        elif outcome is Outcome.FAILED:
            assert settlement.failure is not None
            acks.record_failure(lease, settlement.failure, settlement.error)
        elif outcome is Outcome.SNOOZED:
            acks.snooze(lease, settlement.error)  # type: ignore[arg-type]
        elif outcome is Outcome.RELEASED:
            acks.release(lease)
        elif outcome is Outcome.CANCELLED:
            logger.info("job %s on queue %s cancelled by shutdown; left leased until its "
                        "lease expires", lease.job_id, lease.context.queue,
                        extra=lease_fields(lease))
        elif outcome is Outcome.JOB_CANCELLED:
            acks.cancelled(lease)
        elif outcome is Outcome.LEASE_LOST:
            acks.lost(lease, settlement.why)
        else:  # INFRASTRUCTURE_ERROR: the renewer could not renew
            assert settlement.error is not None
            logger.warning("job %s on queue %s: renewing its lease failed with %s",
                           lease.job_id, lease.context.queue, type(settlement.error).__name__,
                           extra=lease_fields(lease,
                                              error_type=type(settlement.error).__name__))
            raise settlement.error
