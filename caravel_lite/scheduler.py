"""QueueScheduler: recurring jobs on interval and cron schedules, one job per slot.

Every slot of a schedule has one idempotency key (see :mod:`caravel_lite.schedules`),
so any number of schedulers, in threads, processes or machines, converge on exactly
one job per slot through the queue's idempotent enqueue, without a leader. The only
source of "now" is the queue's injected clock.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from caravel_lite import cron as cron_rules
from caravel_lite.clock import from_ms, now_micros
from caravel_lite.errors import InvalidField, QueueIdempotencyConflict
from caravel_lite.logfields import fields
from caravel_lite.observability import logger
from caravel_lite.outage import OutagePolicy, check_max_outage
from caravel_lite.queue import DatabaseQueue
from caravel_lite.schedule_lookup import last_enqueued
from caravel_lite.schedules import (Cron, Interval, Schedule, Slot, check_catch_up,
                                    check_interval, check_schedule_name, check_target,
                                    snapshot)
from caravel_lite.values import Dispatch

MIN_POLL = timedelta(milliseconds=100)
MAX_POLL = timedelta(minutes=1)
SCHEDULE_SPAN = "caravel.schedule.enqueue"


@dataclass(frozen=True)
class ScheduleStatus:
    """What ``caravel-lite schedules`` shows of one schedule."""

    name: str
    description: str
    queue_name: str
    tenant_id: str
    timezone: str
    catch_up: Optional[timedelta]
    last_slot: Optional[Slot]
    last_job_id: Optional[str]
    last_job_state: Optional[str]
    next_run: Optional[datetime]
    next_run_local: Optional[datetime]


class QueueScheduler:
    """Enqueues recurring jobs into ``queue``.

    Register schedules with :meth:`every` and :meth:`cron`, then call :meth:`run_once`
    from your own loop or :meth:`run` in a thread or process of its own. Slots missed
    while no scheduler ran are not back-filled, except within a schedule's
    ``catch_up`` window.

    ``poll_interval`` (100 ms .. 1 min, default 1 min) bounds how long :meth:`run`
    sleeps at a time, so that a clock that jumps (suspend, NTP step, a test clock) is
    noticed; otherwise it sleeps until the next slot is due.
    """

    def __init__(self, queue: DatabaseQueue, *,
                 poll_interval: timedelta = MAX_POLL) -> None:
        if not isinstance(queue, DatabaseQueue):
            raise InvalidField("queue", "must be a caravel_lite.DatabaseQueue")
        if not isinstance(poll_interval, timedelta) or not MIN_POLL <= poll_interval <= MAX_POLL:
            raise InvalidField("poll_interval", f"must be a timedelta between {MIN_POLL} "
                               f"and {MAX_POLL}, got {poll_interval!r}")
        self.queue = queue
        self.poll_interval = poll_interval
        self._schedules: Dict[str, Schedule] = {}
        # The clock reading of each schedule's last complete pass in this process.
        self._handled: Dict[str, Optional[int]] = {}
        self._lock = threading.RLock()

    @property
    def schedules(self) -> List[Schedule]:
        """The registered schedules, in registration order."""
        with self._lock:
            return list(self._schedules.values())

    # -- registration --------------------------------------------------------------------

    def every(self, name: str, interval: timedelta, job: Any, *, queue: str,
              tenant_id: str, catch_up: Optional[timedelta] = None) -> Schedule:
        """Enqueue ``job`` once per ``interval`` (1 s .. 365 days, whole milliseconds)
        into queue ``queue`` for ``tenant_id``. Slots are counted from the epoch
        (``floor(now / interval)``); the current slot is enqueued as soon as a scheduler
        runs within it, due at once.

        ``job`` is serialized now; later changes to the object are ignored. Bad input
        raises ``InvalidField`` (a ``ValueError``) naming the field.
        """
        queue_name = queue
        check_schedule_name(name)
        interval_ms = check_interval(interval)
        return self._add(name, Interval(interval_ms), job, queue_name, tenant_id,
                         check_catch_up(catch_up, interval_ms))

    def cron(self, name: str, expr: str, job: Any, *, queue: str, tenant_id: str,
             timezone: Any = "UTC", catch_up: Optional[timedelta] = None) -> Schedule:
        """Enqueue ``job`` at each occurrence of the cron expression ``expr`` (five
        fields, or six with leading seconds) in the IANA time zone ``timezone``.

        A local time skipped by a daylight-saving jump runs once, at the first valid
        instant after it; a local time that occurs twice runs once, at its first
        occurrence. Occurrences before registration are missed slots (enqueued only
        within ``catch_up``). Needs the ``cron`` extra (cronsim).
        """
        queue_name = queue
        check_schedule_name(name)
        rule = cron_rules.parse(expr, timezone, self._now_us())
        return self._add(name, Cron(rule), job, queue_name, tenant_id,
                         check_catch_up(catch_up, None))

    def _add(self, name: str, timing: Any, job: Any, queue_name: str, tenant_id: str,
             catch_up_us: Optional[int]) -> Schedule:
        check_target(queue_name, tenant_id)
        wire_name, job_type, payload = snapshot(self.queue.registry, job)
        with self._lock:
            if name in self._schedules:
                raise InvalidField("name", f"a schedule named {name!r} is already registered")
            schedule = Schedule(name, timing, queue_name, tenant_id, wire_name, job_type,
                                payload, catch_up_us, self._now_us())
            self._schedules[name] = schedule
            self._handled[name] = None
        logger.debug("registered schedule %s: %s", name, timing.describe(),
                     extra=fields(schedule=name, queue=queue_name, tenant_id=tenant_id))
        return schedule

    # -- enqueueing ----------------------------------------------------------------------

    def _now_us(self) -> int:
        return now_micros(self.queue.clock)

    def run_once(self) -> int:
        """Enqueue every schedule's due slots now, in registration order; returns how
        many jobs were newly enqueued (a slot some scheduler already enqueued counts 0).

        A slot whose job exists with another payload raises
        :class:`QueueIdempotencyConflict` (an invalid one ``InvalidField``), the first
        such, once every other due slot, of its schedule and of the others, has been
        enqueued; its schedule's slots are tried again on the next pass.
        """
        return self._pass(raise_errors=True)

    def _pass(self, raise_errors: bool) -> int:
        created = 0
        refused: Optional[Exception] = None
        with self._lock:
            for schedule in list(self._schedules.values()):
                count, error = self._enqueue_due(schedule, raise_errors)
                created += count
                refused = refused or error
        if refused is not None:
            raise refused
        return created

    def _enqueue_due(self, schedule: Schedule,
                     raise_errors: bool) -> Tuple[int, Optional[Exception]]:
        """Enqueue the slots of ``schedule`` due at one clock reading; a slot that
        fails does not hold up the others. With ``raise_errors`` the first failure is
        returned, for the pass to raise, and nothing is marked handled, so the next
        pass tries every slot again (enqueue is idempotent). Otherwise a failing slot
        is logged and skipped."""
        now_us = self._now_us()
        handled = self._handled[schedule.name]
        if handled is not None and now_us < handled:
            # The clock stepped back: the pass that read the later time handled every
            # slot due up to now. Looking at them again is not harmless, since a slot
            # whose job was pruned (at min_prune_age) would be enqueued anew.
            handled = now_us
        created = 0
        failed: Optional[Exception] = None
        for slot in schedule.due(now_us, handled):
            try:
                # The slot's own span (when tracing is configured): its job is traced
                # back to the scheduler pass that enqueued it (caravel_lite.tracing).
                with self.queue.telemetry.span(SCHEDULE_SPAN, {"schedule": schedule.name,
                                                               "queue": schedule.queue_name}):
                    result = self.queue.enqueue(schedule.decode_job(), Dispatch(
                        queue=schedule.queue_name, tenant_id=schedule.tenant_id,
                        idempotency_key=slot.key))
            except (QueueIdempotencyConflict, InvalidField) as exc:
                if raise_errors:
                    failed = failed or exc
                    continue
                # The schedule's own fault (a changed payload, a payload over the
                # queue's limit) for this slot: say so and go on with its other slots.
                # The slot counts as handled so that the log is not repeated each poll.
                logger.error("schedule %s: slot %s not enqueued: %s: %s", schedule.name,
                             slot.key, type(exc).__name__, exc,
                             extra=fields(schedule=schedule.name, queue=schedule.queue_name,
                                          tenant_id=schedule.tenant_id,
                                          error_type=type(exc).__name__))
                continue
            if not result.already_enqueued:
                created += 1
                logger.info("schedule %s: enqueued slot %s as job %s", schedule.name,
                            slot.key, result.job_id,
                            extra=fields(schedule=schedule.name, job_id=result.job_id,
                                         queue=schedule.queue_name,
                                         tenant_id=schedule.tenant_id))
        if failed is not None:
            return created, failed
        # Handled up to the reading the due slots were computed from, not a later one:
        # a slot that began meanwhile is due on the next pass.
        self._handled[schedule.name] = now_us
        return created, None

    # -- the loop ------------------------------------------------------------------------

    def next_due(self) -> Optional[datetime]:
        """The earliest instant after now at which some schedule has a new slot."""
        at_ms = self._next_due_ms(self._now_us())
        return None if at_ms is None else from_ms(at_ms)

    def _next_due_ms(self, now_us: int) -> Optional[int]:
        found = [at for at in (s.timing.next_after_ms(now_us) for s in self.schedules)
                 if at is not None]
        return min(found) if found else None

    def _next_unhandled_ms(self, now_us: int) -> Optional[int]:
        """The earliest start of a slot after the reading each schedule was last handled
        at (after ``now_us`` for one not handled yet). A pass that ran past a slot's
        start leaves that slot unhandled: it is at or before ``now_us``, so :meth:`run`
        passes again at once rather than sleeping until the next slot, which would make
        it a missed slot (only the newest is enqueued)."""
        with self._lock:
            since = [(s, self._handled[s.name]) for s in self._schedules.values()]
        found = [at for at in (s.timing.next_after_ms(now_us if handled is None
                                                       else min(handled, now_us))
                               for s, handled in since)
                 if at is not None]
        return min(found) if found else None

    def run(self, stop: Optional[threading.Event] = None, *,
            max_outage: Union[None, float, timedelta] = None) -> None:
        """Enqueue due slots until ``stop`` is set, sleeping until the next slot is due
        (at most ``poll_interval`` at a time) and waking at once when ``stop`` is set.

        Unlike :meth:`run_once`, a conflicting or invalid slot is logged and skipped so
        that it holds up neither its schedule's other slots (catch-up slots, the current
        one) nor the other schedules.

        ``max_outage``: None (the default) lets database errors propagate. Seconds (or a
        timedelta) ride out an outage as the worker does (:mod:`caravel_lite.outage`):
        one warning, a jittered back-off, a fresh connection; it raises only after that
        long without a successful pass, or at once for a fault waiting cannot fix. A
        slot that came due meanwhile is enqueued on the first pass that succeeds.
        """
        budget = check_max_outage(max_outage)
        policy = (OutagePolicy(budget, [self.queue.db], what="scheduler")
                  if budget is not None else None)
        stop = stop if stop is not None else threading.Event()
        cap = self.poll_interval.total_seconds()
        logger.info("scheduler started with %d schedule(s)", len(self.schedules),
                    extra=fields(count=len(self.schedules)))
        while not stop.is_set():
            try:
                self._pass(raise_errors=False)
            except Exception as exc:
                if policy is None:
                    raise
                policy.failed(exc, stop.wait)  # re-raises unless waiting may help
                continue
            if policy is not None:
                policy.succeeded()
            now_us = self._now_us()
            upcoming_ms = self._next_unhandled_ms(now_us)
            wait = cap
            if upcoming_ms is not None:
                # Wake one millisecond after the slot starts, so that the clock read on
                # waking is already inside it.
                remaining_us = (upcoming_ms + 1) * 1000 - now_us
                wait = min(cap, max(remaining_us, 0) / 1e6)
            stop.wait(wait)
        logger.info("scheduler stopped")

    # -- inspection ----------------------------------------------------------------------

    def min_prune_age(self, queue_names: Optional[Sequence[str]] = None) -> timedelta:
        """The shortest ``older_than`` with which pruning finished jobs never lets a
        slot run again: the longest interval and catch-up window among the schedules
        (of ``queue_names`` only, when given). A slot is looked at again while it is an
        interval schedule's current slot or within a catch-up window; a job pruned
        sooner loses its key and the slot's job would be made anew."""
        longest = 0
        for schedule in self.schedules:
            if queue_names is not None and schedule.queue_name not in queue_names:
                continue
            if isinstance(schedule.timing, Interval):
                longest = max(longest, schedule.timing.interval_ms * 1000)
            longest = max(longest, schedule.catch_up_us or 0)
        return timedelta(microseconds=longest)

    def status(self) -> List[ScheduleStatus]:
        """Each schedule with its last slot enqueued (read from the database) and its
        next run, in UTC and in its time zone."""
        now_us = self._now_us()
        found: List[ScheduleStatus] = []
        for schedule in self.schedules:
            last = last_enqueued(self.queue.db, schedule, now_us)
            next_ms = schedule.timing.next_after_ms(now_us)
            next_run = None if next_ms is None else from_ms(next_ms)
            catch_up = (None if schedule.catch_up_us is None
                        else timedelta(microseconds=schedule.catch_up_us))
            found.append(ScheduleStatus(
                schedule.name, schedule.timing.describe(), schedule.queue_name,
                schedule.tenant_id, schedule.timing.timezone, catch_up,
                last.slot if last else None, last.job_id if last else None,
                last.state if last else None, next_run,
                None if next_run is None else next_run.astimezone(schedule.timing.zone)))
        return found
