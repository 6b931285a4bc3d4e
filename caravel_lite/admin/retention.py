"""Deleting finished jobs on request, in bounded batches (prune), and single jobs.

Nothing is deleted unless asked for: ``QueueAdmin.prune``, ``DatabaseQueue.prune``,
``caravel-lite prune`` or a worker started with ``prune=``. Each batch reads at most
``batch_size`` ids through the prune index ``(state, finished_at, queue)`` (by
default the dialect's, :class:`~caravel_lite.dialect.PrunePacing`: 100 on SQLite, 1,000
elsewhere), then deletes them in one short transaction that checks each row's state and
finish time again (a dead letter replayed meanwhile is kept), together with their
failure history. After each batch the prune pauses, holding no lock, for a time set by
how long the batch took (on SQLite at least as long again, plus 2 ms: a claim that
waited for the batch's write lock wakes inside that pause and finds the lock free;
a quarter as long elsewhere), so workers keep claiming and completing while a large
prune runs. A pruned job's idempotency key is forgotten: the same key then makes a new
job.
"""
from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Callable, Iterable, List, Optional, Protocol, Sequence, Tuple, Union

import peewee

from caravel_lite import validation
from caravel_lite.admin.filters import instant_ms
from caravel_lite.admin.values import PruneProgress
from caravel_lite.clock import Clock, floor_ms, from_ms, now_micros, system_clock
from caravel_lite.dialect import dialect_of
from caravel_lite.retry import retrying
from caravel_lite.errors import InvalidField
from caravel_lite.schema import FAILURES_TABLE, JOBS_TABLE, PRUNE_INDEX
from caravel_lite.values import JobState
from caravel_lite.workflows.membership import MARKED, MARKER, UNMARKED
from caravel_lite.workflows.removal import Removal

FINISHED = (JobState.COMPLETED, JobState.DEAD_LETTER, JobState.CANCELLED)
MAX_BATCH = 10_000
Progress = Callable[[PruneProgress], None]
Sleep = Callable[[float], None]
Timer = Callable[[], float]


def check_states(states: Iterable[object]) -> Tuple[JobState, ...]:
    """COMPLETED, DEAD_LETTER and/or CANCELLED (members or their values), at least one."""
    try:
        chosen = tuple(s if isinstance(s, JobState) else JobState(str(s).lower())
                       for s in states)
    except (TypeError, ValueError):
        raise InvalidField("states", "may only name completed, dead_letter and cancelled") from None
    if not chosen or any(s not in FINISHED for s in chosen):
        raise InvalidField("states", "may only name completed, dead_letter and cancelled")
    return tuple(dict.fromkeys(chosen))


def cutoff_ms(older_than: Union[timedelta, datetime], now_us: int) -> int:
    """The finish time before which jobs are pruned: an aware datetime, or a
    non-negative timedelta before now."""
    if not isinstance(older_than, (timedelta, datetime)):
        raise InvalidField("older_than", "must be a timedelta or an aware datetime")
    value = instant_ms("older_than", older_than, now_us)
    assert value is not None
    return value


class KeepsScheduleKeys(Protocol):
    """What :meth:`QueueAdmin.prune` needs of the application's schedules (a
    :class:`~caravel_lite.QueueScheduler`): how long their slots' keys must be kept."""

    def min_prune_age(self, queue_names: Optional[Sequence[str]] = None) -> timedelta: ...


def check_schedule_keys(older_than: Union[timedelta, datetime], now_us: int,
                        scheduler: Optional[KeepsScheduleKeys], queue: Optional[str]) -> None:
    """Refuse an ``older_than`` that would prune a slot's job while the slot is still
    looked at (README, Recurring jobs: retention): the same rule as the worker's
    ``--prune-after`` with ``--scheduler``. Nothing is checked without ``scheduler``."""
    if scheduler is None:
        return
    if not callable(getattr(scheduler, "min_prune_age", None)):
        raise InvalidField("scheduler", "must be a caravel_lite.QueueScheduler (or have "
                           "min_prune_age)")
    needed = scheduler.min_prune_age(None if queue is None else [queue])
    age = (older_than if isinstance(older_than, timedelta)
           else from_ms(floor_ms(now_us)) - older_than)
    if age < needed:
        where = f"queue {queue!r}" if queue is not None else "every queue"
        raise InvalidField("older_than", f"{age} is shorter than {needed}, the longest "
                           f"interval or catch-up window of the schedules on {where}: a "
                           f"pruned slot would run again")


class Pruner:
    """The statements of pruning and deleting on one database. ``sleep`` and ``timer``
    (seconds, monotonic) pace the batches (tests pass their own); ``last_pause`` is the
    pause still owed after the last batch :meth:`prune` wrote, which it does not sleep
    (the worker spends it waiting for new work). ``clock`` stamps what the removal of
    a chain's or batch's jobs changes (:mod:`caravel_lite.workflows.removal`)."""

    _removal: Optional[Removal] = None

    def __init__(self, db: peewee.Database, *, sleep: Sleep = time.sleep,
                 timer: Timer = time.monotonic, clock: Clock = system_clock) -> None:
        self.db = db
        self.clock = clock
        self.dialect = dialect_of(db)
        self.pacing = self.dialect.prune_pacing
        self._sleep = sleep
        self._timer = timer
        self.last_pause = 0.0
        p = db.param
        # Through the prune index by name where the dialect takes a hint: SQLite with
        # statistics would rather read one queue's finished rows through the claim
        # index (it keeps no histogram of finished_at).
        table = self.dialect.table_via(JOBS_TABLE, PRUNE_INDEX)
        self._select = (f"SELECT id FROM {table} WHERE state = {p} AND finished_at < {p}"
                        " ORDER BY finished_at LIMIT {n}")
        self._select_queue = (f"SELECT id FROM {table} WHERE state = {p} "
                              f"AND finished_at < {p} AND queue = {p} "
                              "ORDER BY finished_at LIMIT {n}")
        self._count = f"SELECT COUNT(*) FROM {table} WHERE state = {p} AND finished_at < {p}"

    def _ids(self, n: int) -> str:
        return ", ".join([self.db.param] * n)

    @property
    def removal(self) -> Removal:
        if self._removal is None:
            self._removal = Removal(self.db)
        return self._removal

    def _delete_batch(self, ids: List[str], condition: str, params: Sequence[object]) -> int:
        """Delete the jobs ``ids`` still matching ``condition``, and the failure
        history of those deleted, in one transaction; how many jobs went. The jobs of
        a chain or batch are left out of the plain DELETE and, when it deleted fewer
        than ``ids``, deleted by :class:`Removal` with what that means for their
        workflows (so a batch of plain jobs runs the statements it ran before)."""
        marks = self._ids(len(ids))
        plain = (f"DELETE FROM {JOBS_TABLE} WHERE id IN ({marks}) AND {condition} "
                 f"AND {UNMARKED.format(p=self.db.param)}")

        def once() -> int:
            with self.dialect.write_transaction(self.db):
                deleted = int(self.db.execute_sql(plain, [*ids, *params, MARKED]).rowcount)
                if deleted == len(ids):  # ids are distinct: every one of them went
                    gone = ids
                else:
                    left = self.db.execute_sql(
                        f"SELECT id, job_options FROM {JOBS_TABLE} WHERE id IN ({marks})",
                        ids).fetchall()
                    kept = {row[0] for row in left}
                    if any(row[1] is not None and MARKER in row[1] for row in left):
                        removed = self.removal.delete(left, condition, params,
                                                      floor_ms(now_micros(self.clock)))
                        deleted += len(removed)
                        kept.difference_update(removed)
                    # (nothing deleted: nothing's history to delete, as before)
                    gone = [job_id for job_id in ids if job_id not in kept] if deleted else []
                if gone:
                    self.db.execute_sql(
                        f"DELETE FROM {FAILURES_TABLE} WHERE job_id IN "
                        f"({self._ids(len(gone))})", gone)
                return deleted
        return retrying(self.dialect, self.db, once)

    def check_batch_size(self, batch_size: Optional[int]) -> int:
        """``batch_size`` (1..MAX_BATCH), or the dialect's when None."""
        if batch_size is None:
            return self.pacing.batch
        return validation.check_int("batch_size", batch_size, 1, MAX_BATCH)

    def prune(self, cutoff: int, states: Sequence[JobState], queue: Optional[str],
              batch_size: Optional[int] = None, progress: Optional[Progress] = None,
              max_batches: Optional[int] = None) -> int:
        """Delete jobs in ``states`` that finished before ``cutoff`` (epoch ms), of
        ``queue`` only when given, ``batch_size`` at a time (the dialect's when None;
        at most ``max_batches`` batches when given), pausing before each batch after
        the first as :attr:`pacing` says for the time the previous one's transaction
        took; returns how many."""
        batch_size = self.check_batch_size(batch_size)
        if queue is not None:
            validation.check_queue(queue)
        total = 0
        if progress is not None:
            total = self.count(cutoff, states, queue)
            progress(PruneProgress(0, total, 0))
        deleted = batches = 0
        self.last_pause = 0.0  # owed since the last batch, paid before the next one
        p = self.db.param
        for state in states:
            select = (self._select_queue if queue else self._select).format(n=int(batch_size))
            params = (state.value, cutoff, queue) if queue else (state.value, cutoff)
            while max_batches is None or batches < max_batches:
                if self.last_pause > 0:
                    # Inside the caller's own transaction its locks stay held: no pause.
                    if not self.db.in_transaction():
                        self._sleep(self.last_pause)
                    self.last_pause = 0.0
                ids = [row[0] for row in self.db.execute_sql(select, params).fetchall()]
                if not ids:
                    break
                began = self._timer()
                deleted += self._delete_batch(ids, f"state = {p} AND finished_at < {p}",
                                              (state.value, cutoff))
                batches += 1
                self.last_pause = self.pacing.pause(self._timer() - began)
                if progress is not None:
                    progress(PruneProgress(deleted, max(total, deleted), batches))
                if len(ids) < batch_size:
                    break
        return deleted

    def count(self, cutoff: int, states: Sequence[JobState], queue: Optional[str]) -> int:
        """How many jobs :meth:`prune` would delete now (read from the prune index)."""
        if queue is not None:
            validation.check_queue(queue)
        sql = self._count + (f" AND queue = {self.db.param}" if queue else "")
        total = 0
        for state in states:
            extra = (queue,) if queue else ()
            (n,) = self.db.execute_sql(sql, (state.value, cutoff, *extra)).fetchone()
            total += int(n)
        return total

    def delete_matching(self, ids: List[str], condition: str,
                        params: Sequence[object]) -> int:
        """Delete those of the jobs ``ids`` that still match ``condition`` when the
        statement runs (never a leased one), with their failure history, in one
        transaction; how many went."""
        p = self.db.param
        return self._delete_batch(ids, f"state <> {p} AND {condition}",
                                  (JobState.LEASED.value, *params))

    def delete_each(self, batches: Iterable[List[str]], condition: str,
                    params: Sequence[object]) -> int:
        """:meth:`delete_matching` for each list of ids, pausing before each one after
        the first as :attr:`pacing` says for the time the previous one took (as a
        prune does, so that workers keep claiming during a large bulk delete); how
        many jobs went."""
        deleted = 0
        pause = 0.0
        for ids in batches:
            if pause > 0 and not self.db.in_transaction():
                self._sleep(pause)
            began = self._timer()
            deleted += self.delete_matching(ids, condition, params)
            pause = self.pacing.pause(self._timer() - began)
        return deleted

    def delete(self, job_id: str, condition: str = "", params: Sequence[object] = ()) -> bool:
        """Delete one job unless it is leased (and unless ``condition`` fails), with its
        failure history. Its idempotency key becomes free again."""
        p = self.db.param
        where = f"state <> {p}" + (f" AND {condition}" if condition else "")
        return self._delete_batch([job_id], where, (JobState.LEASED.value, *params)) == 1
