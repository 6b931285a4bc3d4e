"""DatabaseQueue: durable jobs in the application's own database.

Delivery is at least once. Enqueue is idempotent per (queue, tenant, key); a claim takes
a renewable lease fenced by a random token; every state change is one conditional
UPDATE, so a worker whose lease expired or was superseded can never overwrite the
outcome recorded by the worker that took over.
"""
from __future__ import annotations

import dataclasses
import secrets
import uuid
from datetime import timedelta
from typing import Any, List, Optional, Sequence, Tuple

import peewee

from caravel_lite import validation
from caravel_lite.admin import QueueAdmin
from caravel_lite.aio import AsyncQueueCalls
from caravel_lite.enqueue import Enqueuing
from caravel_lite.clock import (Clock, ceil_ms, duration_micros, floor_ms, from_ms, now_micros,
                                system_clock)
from caravel_lite.dialect import dialect_of, retrying, transient_retries
from caravel_lite.errors import InvalidField
from caravel_lite.observability import Telemetry, default_telemetry, logger
from caravel_lite.options import QueueOptions, resolve_options
from caravel_lite.registry import JobRegistry, require_registry
from caravel_lite.statements import BatchStatements, Statements
from caravel_lite.values import Failure, JobContext, QueueLease

# How many due candidates one claim round reads; losing the race for one moves on to
# the next, and a claim gives up (returns None) after CLAIM_ROUNDS empty-handed rounds.
CANDIDATES = 4
CLAIM_ROUNDS = 3
# Largest claim_many; complete_many and enqueue_many split longer batches into
# statements of at most this many rows (well under every database's parameter limit).
MAX_BATCH = 1000
COMPLETE_CHUNK = 100


class _PartialBatch(Exception):
    """A batch statement matched fewer rows than it named (rolled back, then settled
    one by one)."""


def _claim_order(row: Sequence[Any]) -> Tuple[Any, ...]:
    # (id, attempts, tenant, wire, payload, max_attempts, priority, available_at,
    # enqueued_at): priority, due time, enqueue time, then id as the tie-breaker.
    return (row[6], row[7], row[8], row[0])


def backoff_micros(options: QueueOptions, attempt: int) -> int:
    """retry_delay * 2^(attempt-1), capped at max_retry_delay, in exact microseconds."""
    base = duration_micros(options.retry_delay)
    cap = duration_micros(options.max_retry_delay)
    exponent = max(attempt - 1, 0)
    # Stop doubling once past the cap so the value stays small whatever the attempt.
    if exponent >= 63 or base << exponent >= cap:
        return cap
    return base << exponent


class DatabaseQueue(Enqueuing, QueueAdmin, AsyncQueueCalls):
    """The queue over one Peewee database (SQLite, PostgreSQL or MariaDB/MySQL).

    ``db`` must have been migrated (:func:`caravel_lite.migrate`); the queue never
    creates tables. ``clock`` is the only source of "now".
    """

    def __init__(self, db: peewee.Database, registry: JobRegistry,
                 options: Optional[QueueOptions] = None, *, clock: Clock = system_clock,
                 telemetry: Optional[Telemetry] = None) -> None:
        self.db = validation.check_database("db", db)
        self.registry = require_registry(registry)
        self.options = resolve_options(options)
        self.clock = validation.check_clock(clock)
        self.telemetry = telemetry or default_telemetry()
        self.dialect = dialect_of(db)
        self._sql = Statements.build(db, CANDIDATES)
        self._batch = BatchStatements(db, self.dialect.claim_lock)
        self._lease_us = duration_micros(self.options.lease_duration)
        self._lifetime_us = duration_micros(self.options.max_lease_lifetime)
        super().__init__()

    # -- helpers -----------------------------------------------------------------------

    def _now_us(self) -> int:
        return now_micros(self.clock)

    def _execute(self, sql: str, params: Sequence[Any]) -> Any:
        return self.db.execute_sql(sql, params)

    def _fenced(self, sql: str, params: Sequence[Any]) -> int:
        """Run a conditional UPDATE, retrying lock conflicts; returns rows matched."""
        def run() -> int:
            return self.db.execute_sql(sql, params).rowcount
        return retrying(self.dialect, self.db, run, on_retry=transient_retries.increment)

    # -- claim -------------------------------------------------------------------------

    def _sweep(self, queue: str, now_ms: int) -> Tuple[int, int]:
        """Dead-letter expired leases with no attempts left; make the others claimable.
        A plain read first, so the usual case takes no write lock."""
        if self._execute(self._sql.expired_exists, (queue, now_ms)).fetchone() is None:
            return 0, 0
        return self._sweep_expired(queue, now_ms)

    def _sweep_expired(self, queue: str, now_ms: int) -> Tuple[int, int]:
        dead = self._fenced(self._sql.sweep_exhausted, (now_ms, now_ms, queue, now_ms))
        reclaimed = self._fenced(self._sql.sweep_reclaimable, (now_ms, queue, now_ms))
        if dead:
            self.telemetry.count("deadlettered", queue, dead, Failure.ATTEMPTS_EXHAUSTED.value)
            logger.warning("%d expired lease(s) on queue %s dead-lettered: attempts exhausted",
                           dead, queue)
        return dead, reclaimed

    def claim(self, queue: str) -> Optional[QueueLease]:
        """Lease the best due job of ``queue`` (priority, due time, enqueue time, id), or
        return None. Exactly one contender wins a job, across threads and processes.
        Each claim is an attempt. Before claiming, expired leases of ``queue`` whose
        attempts are used up are dead-lettered and the others made claimable."""
        leases = self.claim_many(queue, 1)
        return leases[0] if leases else None

    def claim_many(self, queue: str, limit: int) -> List[QueueLease]:
        """Lease up to ``limit`` (1..1000) due jobs of ``queue`` at once, best first, in
        as few round trips as the database allows; every lease shares one expiry and is
        fenced on its own (complete, fail and renew each lease as usual). The same
        guarantees as :meth:`claim`: one winner per job across threads and processes,
        each claim an attempt, expired leases swept first. Fewer than ``limit`` (or
        none) come back when fewer are due or after losing a bounded number of races.
        """
        validation.check_queue(queue)
        validation.check_int("limit", limit, 1, MAX_BATCH)
        now_us = self._now_us()
        now_ms = floor_ms(now_us)
        expires_ms = ceil_ms(now_us + self._lease_us)
        if self.dialect.claim_lock is not None:
            leases = self._claim_returning(queue, limit, now_us, now_ms, expires_ms)
        else:
            leases = self._claim_portable(queue, limit, now_us, now_ms, expires_ms)
        if leases:
            self.telemetry.count("claimed", queue, len(leases))
        return leases

    def _lease(self, queue: str, row: Sequence[Any], attempt: int, token: str,
               expires_ms: int, now_us: int) -> QueueLease:
        job_id, _, tenant_id, wire_name, payload, max_attempts = row[:6]
        ident = uuid.UUID(job_id)
        return QueueLease(ident, attempt, from_ms(expires_ms),
                          JobContext(ident, queue, tenant_id, attempt), wire_name, payload,
                          token, now_us, max_attempts)

    def _claim_returning(self, queue: str, limit: int, now_us: int, now_ms: int,
                         expires_ms: int) -> List[QueueLease]:
        """One UPDATE ... RETURNING takes the best due rows (PostgreSQL: rows locked by
        another claim are skipped; SQLite: the statement runs under the single write
        lock). It claims nothing while the queue holds an expired lease; then the sweep
        runs and the claim is repeated once."""
        sql = self._batch.claim_returning(limit)
        for _ in range(2):
            token = secrets.token_hex(16)
            params = (queue, now_ms, token, expires_ms, now_ms, now_ms, queue, now_ms)
            rows = retrying(self.dialect, self.db,
                            lambda: self.db.execute_sql(sql, params).fetchall(),
                            on_retry=transient_retries.increment)
            if rows:
                rows.sort(key=_claim_order)
                # RETURNING shows the row after the update: attempts already counts this claim.
                return [self._lease(queue, row, row[1], token, expires_ms, now_us)
                        for row in rows]
            if self._sweep(queue, now_ms) == (0, 0):
                return []
        return []

    def _claim_portable(self, queue: str, limit: int, now_us: int, now_ms: int,
                        expires_ms: int) -> List[QueueLease]:
        """Read the best due candidates (and whether any lease expired) in one
        statement, then take them with one UPDATE fenced on each row's observed state;
        a lost race moves on to the next candidates, for a bounded number of rounds."""
        read = self._batch.claim_read(limit + CANDIDATES - 1)
        leases: List[QueueLease] = []
        tried: set = set()
        swept = False
        for _ in range(CLAIM_ROUNDS):
            rows = self._execute(read, (queue, now_ms, queue, now_ms)).fetchall()
            if not swept and any(row[0] == 1 for row in rows):
                swept = True
                self._sweep_expired(queue, now_ms)
                rows = self._execute(read, (queue, now_ms, queue, now_ms)).fetchall()
            candidates = sorted((row[1:] for row in rows if row[0] == 0
                                 and row[1] not in tried), key=_claim_order)
            if not candidates:
                break
            while candidates and len(leases) < limit:
                batch = candidates[:limit - len(leases)]
                del candidates[:len(batch)]
                tried.update(row[0] for row in batch)
                leases += self._take(queue, batch, now_us, now_ms, expires_ms)
            if len(leases) >= limit:
                break
        return leases

    def _take(self, queue: str, rows: List[Sequence[Any]], now_us: int, now_ms: int,
              expires_ms: int) -> List[QueueLease]:
        token = secrets.token_hex(16)
        if len(rows) == 1:
            job_id, attempts = rows[0][0], rows[0][1]
            taken = {job_id} if self._fenced(self._sql.take, (
                token, expires_ms, now_ms, now_ms, job_id, attempts, now_ms)) == 1 else set()
        else:
            ids = [row[0] for row in rows]
            params: List[Any] = [token, expires_ms, now_ms, now_ms, *ids, now_ms]
            for row in rows:
                params += (row[0], row[1])
            matched = self._fenced(self._batch.take_many(len(rows)), params)
            if matched == len(rows):
                taken = set(ids)
            elif matched == 0:
                taken = set()
            else:  # some were lost to another claim: read back which rows hold our token
                taken = {row[0] for row in self._execute(
                    self._batch.taken_ids(len(ids)), (*ids, token)).fetchall()}
        # The UPDATE was fenced on the observed attempt count: each taken row is now at +1.
        return [self._lease(queue, row, row[1] + 1, token, expires_ms, now_us)
                for row in rows if row[0] in taken]

    # -- lease operations ----------------------------------------------------------------

    def renew(self, lease: QueueLease) -> Optional[QueueLease]:
        """Extend an owned lease to min(now + lease_duration, claim start +
        max_lease_lifetime). Returns the new lease, or None (and changes nothing) when
        the lease is no longer owned or the lifetime is used up. Never shortens a lease;
        does not count as an attempt."""
        now_us = self._now_us()
        target_us = min(now_us + self._lease_us, lease._claimed_at_us + self._lifetime_us)
        if target_us <= now_us:
            return None
        target_ms = ceil_ms(target_us)
        now_ms = floor_ms(now_us)
        matched = self._fenced(self._sql.renew, (target_ms, now_ms, str(lease.job_id),
                                                 lease._token, now_ms, target_ms))
        if matched != 1:
            return None
        return dataclasses.replace(lease, expires_at=from_ms(target_ms))

    def complete(self, lease: QueueLease) -> bool:
        """Mark an owned lease's job COMPLETED. False (nothing changed) if not owned."""
        done = self._complete_raw(lease, floor_ms(self._now_us()))
        if done:
            self.telemetry.count("completed", lease.context.queue)
        return done

    def _complete_raw(self, lease: QueueLease, now_ms: int) -> bool:
        return self._fenced(self._sql.complete, (now_ms, now_ms, str(lease.job_id),
                                                 lease._token, now_ms)) == 1

    def complete_many(self, leases: Sequence[QueueLease]) -> List[bool]:
        """Complete a batch of leases, one statement per up to 100 leases; element i of
        the result says whether ``leases[i]`` was acknowledged. Each row is fenced by
        its own token and an unexpired lease, exactly as :meth:`complete`: a stale
        lease is answered False, changes nothing and does not hold back the others."""
        leases = list(leases)
        for lease in leases:
            if not isinstance(lease, QueueLease):
                raise InvalidField("leases", f"must hold QueueLease values, got {lease!r}")
        results = [False] * len(leases)
        now_ms = floor_ms(self._now_us())
        pending: List[int] = []
        repeats: List[int] = []
        seen: set = set()
        for index, lease in enumerate(leases):
            ident = str(lease.job_id)
            # Two leases of one job cannot share a statement (one CASE arm per id);
            # at most one of them is owned, so a repeat is settled on its own, after.
            (repeats if ident in seen else pending).append(index)
            seen.add(ident)
        for start in range(0, len(pending), COMPLETE_CHUNK):
            chunk = pending[start:start + COMPLETE_CHUNK]
            group = [leases[i] for i in chunk]
            done = self._complete_group(group, now_ms)
            for index, lease in zip(chunk, group):
                if str(lease.job_id) in done:
                    results[index] = True
                    self.telemetry.count("completed", lease.context.queue)
        for index in repeats:
            results[index] = self.complete(leases[index])
        return results

    def _complete_group(self, group: List[QueueLease], now_ms: int) -> set:
        if len(group) == 1:
            lease = group[0]
            return {str(lease.job_id)} if self._complete_raw(lease, now_ms) else set()
        ids = [str(lease.job_id) for lease in group]
        params: List[Any] = [now_ms, now_ms, *ids, now_ms]
        for lease in group:
            params += (str(lease.job_id), lease._token)
        if self.dialect.update_returning:
            sql = self._batch.complete_many_returning(len(group))
            rows = retrying(self.dialect, self.db,
                            lambda: self.db.execute_sql(sql, params).fetchall(),
                            on_retry=transient_retries.increment)
            return {row[0] for row in rows}
        # Without RETURNING the row count cannot say which leases were stale. The batch
        # runs in a transaction that is kept only when every lease matched; otherwise
        # it is rolled back and each lease is settled on its own (rare: a stale lease).
        sql = self._batch.complete_many(len(group))

        def all_or_nothing() -> bool:
            try:
                with self.dialect.write_transaction(self.db):
                    if self.db.execute_sql(sql, params).rowcount != len(group):
                        raise _PartialBatch
            except _PartialBatch:
                return False
            return True

        if retrying(self.dialect, self.db, all_or_nothing,
                    on_retry=transient_retries.increment):
            return set(ids)
        return {str(lease.job_id) for lease in group if self._complete_raw(lease, now_ms)}

    def fail(self, lease: QueueLease, failure: Failure) -> bool:
        """Record a failed attempt of an owned lease: back to PENDING after the backoff
        delay (rounded up to the millisecond), or DEAD_LETTER when its attempts are used
        up, or at once for ``Failure.DISCARDED``. Stores only the category. False
        (nothing changed) if not owned."""
        if not isinstance(failure, Failure):
            raise InvalidField("failure", f"must be a caravel_lite.Failure, got {failure!r}")
        now_us = self._now_us()
        now_ms = floor_ms(now_us)
        queue = lease.context.queue
        ident = (str(lease.job_id), lease._token, now_ms)
        # DISCARDED means no retry can help: dead-lettered whatever attempts are left.
        if lease.attempt >= lease._max_attempts or failure is Failure.DISCARDED:
            changed = self._fenced(self._sql.dead_letter,
                                   (failure.value, now_ms, now_ms) + ident) == 1
            outcome = "deadlettered"
        else:
            due_ms = ceil_ms(now_us + backoff_micros(self.options, lease.attempt))
            changed = self._fenced(self._sql.retry,
                                   (due_ms, failure.value, now_ms) + ident) == 1
            outcome = "retried"
        if changed:
            self.telemetry.count("failed", queue, failure=failure.value)
            self.telemetry.count(outcome, queue, failure=failure.value)
        return changed

    def release(self, lease: QueueLease) -> bool:
        """Hand back an owned job that was claimed but never run (a worker stopping
        with prefetched jobs): PENDING again, the claim's attempt given back, its due
        time and last failure unchanged, the lease cleared. False (nothing changed)
        when the lease is no longer owned. Counted as ``released``."""
        if not isinstance(lease, QueueLease):
            raise InvalidField("lease", f"must be a QueueLease, got {lease!r}")
        now_ms = floor_ms(self._now_us())
        released = self._fenced(self._sql.release,
                                (now_ms, str(lease.job_id), lease._token, now_ms)) == 1
        if released:
            self.telemetry.count("released", lease.context.queue)
        return released

    def snooze(self, lease: QueueLease, delay: timedelta) -> bool:
        """Put an owned job back to PENDING due ``delay`` from now (rounded up to the
        millisecond), with the claim's attempt given back and its last failure
        unchanged: what a handler raising :class:`caravel_lite.Snooze` gets. False
        (nothing changed) when the lease is no longer owned. Counted as ``snoozed``."""
        if not isinstance(lease, QueueLease):
            raise InvalidField("lease", f"must be a QueueLease, got {lease!r}")
        if not isinstance(delay, timedelta) or delay < timedelta(0):
            raise InvalidField("delay", f"must be a timedelta >= 0, got {delay!r}")
        now_us = self._now_us()
        now_ms = floor_ms(now_us)
        due_ms = ceil_ms(now_us + duration_micros(delay))
        snoozed = self._fenced(self._sql.snooze, (due_ms, now_ms, str(lease.job_id),
                                                  lease._token, now_ms)) == 1
        if snoozed:
            self.telemetry.count("snoozed", lease.context.queue)
        return snoozed

    def reclaim_expired(self, queue: str) -> int:
        """Sweep ``queue`` now: expired leases with attempts left become claimable again
        (last failure LEASE_EXPIRED), the others DEAD_LETTER. Returns how many moved."""
        validation.check_queue(queue)
        dead, reclaimed = self._sweep(queue, floor_ms(self._now_us()))
        return dead + reclaimed
