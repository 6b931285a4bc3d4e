"""DatabaseQueue: durable jobs in the application's own database.

Delivery is at least once. Enqueue is idempotent per (queue, tenant, key); a claim takes
a renewable lease fenced by a random token; every state change is one conditional
UPDATE, so a worker whose lease expired or was superseded can never overwrite the
outcome recorded by the worker that took over.

Lost replies (the connection dropped after a statement was sent, so the server may or
may not have carried it out) are recovered by each operation reading back what it
owns, never by the connection layer sending the statement again: a claim the rows
holding its lease token (caravel_lite.claim), an enqueue its own job ids
(caravel_lite.enqueue), and the lease operations (renew, complete, fail, release,
snooze), which are fenced by the lease and may be repeated, the row they wrote
(:meth:`DatabaseQueue._fenced`). SQLite runs in-process and cannot lose a reply.
"""
from __future__ import annotations

import dataclasses
import secrets
from datetime import timedelta
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple

import peewee

from caravel_lite import failures, job_options, validation
from caravel_lite.administration import Administration
from caravel_lite.aio import AsyncQueueCalls
from caravel_lite.cancel import Cancelling
from caravel_lite.claim import CANDIDATES, Claimer
from caravel_lite.enqueue import Enqueuing
from caravel_lite.fairness import GroupClaimer
from caravel_lite.limits import FlowPolicy
from caravel_lite.clock import (Clock, ceil_ms, duration_micros, floor_ms, from_ms, now_micros,
                                system_clock)
from caravel_lite.dialect import dialect_of
from caravel_lite.errors import InvalidField
from caravel_lite.observability import Telemetry, default_telemetry
from caravel_lite.options import QueueOptions, resolve_options
from caravel_lite.recorded_errors import recorded
from caravel_lite.registry import JobRegistry, require_registry
from caravel_lite.results import Results
from caravel_lite.job_options import RunOptions
from caravel_lite.fences import Wrote, claimed_by, fenced_write, left_as
from caravel_lite.retry import budgeted, recovering, retrying
from caravel_lite.sessions import private_memory
from caravel_lite.statements import BatchStatements, Statements
from caravel_lite.statements import COMPLETED, DEAD, LEASED, PENDING
from caravel_lite.values import ClaimBatch, Failure, QueueLease
from caravel_lite.workflows.calls import WorkflowCalls
from caravel_lite.workflows.membership import MARKER
from caravel_lite.workflows.sweep import ExpiredMembers

__all__ = ["DatabaseQueue", "CANDIDATES", "MAX_BATCH", "backoff_micros", "new_claim_token"]
# Largest claim_many; complete_many and enqueue_many split longer batches into
# statements of at most this many rows (well under every database's parameter limit).
MAX_BATCH = 1000
COMPLETE_CHUNK = 100


class _PartialBatch(Exception):
    """A batch statement matched fewer rows than it named (rolled back, then settled
    one by one)."""


def new_claim_token() -> str:
    """A fresh lease token for :meth:`DatabaseQueue.claim_batch` (random, 128 bits)."""
    return secrets.token_hex(16)


def backoff_micros(options: QueueOptions, attempt: int,
                   job: Optional[RunOptions] = None) -> int:
    """retry_delay * 2^(attempt-1), capped at max_retry_delay, in exact microseconds;
    ``job``'s own retry_delay and max_retry_delay, where it stored them, over the
    queue's ``options``."""
    base = duration_micros(options.retry_delay)
    cap = duration_micros(options.max_retry_delay)
    if job is not None:
        base = job.retry_delay_us if job.retry_delay_us is not None else base
        cap = job.max_retry_delay_us if job.max_retry_delay_us is not None else cap
    exponent = max(attempt - 1, 0)
    # Stop doubling once past the cap so the value stays small whatever the attempt.
    if exponent >= 63 or base << exponent >= cap:
        return cap
    return base << exponent


class DatabaseQueue(Enqueuing, Administration, AsyncQueueCalls, Results, Cancelling,
                    WorkflowCalls):
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
        if private_memory(db):
            raise InvalidField(
                "db", "an in-memory SQLite database (SqliteDatabase(':memory:')) is private "
                "to each connection, and a worker uses several threads (its lease renewal "
                "runs on its own): use open_database('sqlite:///:memory:'), which shares "
                "one in-memory database between threads, or a database file")
        self._direct_statements = self.dialect.in_process and bool(
            getattr(db, "repeats_own_statements", False))
        self._sql = Statements.build(db, CANDIDATES)
        self._batch = BatchStatements(db, self.dialect.claim_lock,
                                      self.dialect.picked_ids, self.dialect.listed)
        self._claimer = Claimer(db, self.dialect, self._sql, self._batch, self.telemetry)
        self._flow = FlowPolicy(self.registry, self.options)
        self._claimer.before_sweep = ExpiredMembers(db, self.dialect,
                                                    lambda: self.followups).finish
        self._groups = GroupClaimer(db, self._claimer, self._flow)
        self._failures = failures.FailureLog(db)
        self._lease_us = duration_micros(self.options.lease_duration)
        self._lifetime_us = duration_micros(self.options.max_lease_lifetime)
        super().__init__()

    # -- helpers -----------------------------------------------------------------------

    def _now_us(self) -> int:
        return now_micros(self.clock)

    def _execute(self, sql: str, params: Sequence[Any]) -> Any:
        return self.db.execute_sql(sql, params)

    def _fenced(self, sql: str, params: Sequence[Any], job_id: Optional[str] = None,
                wrote: Optional[Wrote] = None,
                then: Optional[Callable[[], None]] = None) -> int:
        """:func:`caravel_lite.fences.fenced_write` on this queue's database."""
        return fenced_write(self.dialect, self.db, sql, params, self._sql.settled, job_id,
                            wrote, then)

    # -- claim -------------------------------------------------------------------------

    def claim(self, queue: str) -> Optional[QueueLease]:
        """Lease the best due job of ``queue`` (priority, due time, enqueue time, id), or
        return None. Exactly one contender wins a job, across threads and processes.
        Each claim is an attempt. Before claiming, expired leases of ``queue`` whose
        attempts are used up are dead-lettered and the others made claimable (logged at
        WARNING: their jobs are taken over).

        A lost reply (the connection dropped after the claim was sent): the claim's
        lease token was chosen before sending, so it reads back the rows holding it on
        a new connection and returns those; none means nothing was committed, and the
        claim runs again under the same token. No row is left leased under a token
        nobody holds and no attempt is spent on a job no handler gets."""
        validation.check_queue(queue)
        leases = self._claim_batch(queue, 1).leases
        return leases[0] if leases else None

    def claim_many(self, queue: str, limit: int) -> List[QueueLease]:
        """Lease up to ``limit`` (1..1000) due jobs of ``queue`` at once, best first, in
        as few round trips as the database allows; every lease shares one expiry and is
        fenced on its own (complete, fail and renew each lease as usual). The same
        guarantees as :meth:`claim`: one winner per job across threads and processes,
        each claim an attempt, expired leases swept first. Fewer than ``limit`` (or
        none) come back when fewer are due or after losing a bounded number of races.
        A lost reply is recovered as :meth:`claim`'s: the rows holding the claim's
        token are its leases.
        """
        validation.check_queue(queue)
        return list(self._claim_batch(queue, limit).leases)

    def claim_batch(self, queue_name: str, limit: int, *,
                    token: Optional[str] = None) -> ClaimBatch:
        """:meth:`claim_many` that also says whether an empty answer means an empty
        queue: ``contended`` is True when due jobs existed but another claimer took
        every one first (on the portable path of servers without SKIP LOCKED, and in
        a queue with flow control, whose jobs are chosen before they are leased); a
        caller may then claim again at once rather than wait. A lost reply
        is recovered as :meth:`claim`'s.

        ``token`` (from :func:`new_claim_token`): the lease token to claim under,
        chosen by the caller, so that a caller whose answer never reached it (an
        interrupt after the commit) can hand its rows back: :meth:`release_claim`."""
        validation.check_queue(queue_name, "queue_name")
        if token is not None and not (isinstance(token, str) and len(token) == 32):
            raise InvalidField("token", "must come from caravel_lite.queue.new_claim_token()")
        return self._claim_batch(queue_name, limit, token)

    @budgeted
    def release_claim(self, queue_name: str, token: str) -> int:
        """Hand back (as :meth:`release`, attempt given back) every job of
        ``queue_name`` still leased under the claim ``token``: a claim whose answer its
        caller never got. Returns how many; may be repeated (a repeat finds none)."""
        now_us = self._now_us()
        held = self._claimer.held(queue_name, token, ceil_ms(now_us + self._lease_us), now_us)
        return sum(1 for lease in held if self.release(lease))

    @budgeted
    def _claim_batch(self, queue_name: str, limit: int,
                     token: Optional[str] = None) -> ClaimBatch:
        validation.check_int("limit", limit, 1, MAX_BATCH)
        now_us = self._now_us()
        # A queue under flow control claims group by group (caravel_lite.fairness).
        claimer = self._groups if self._flow.gated() else self._claimer
        batch = claimer.claim(queue_name, limit, now_us, floor_ms(now_us),
                              ceil_ms(now_us + self._lease_us), token)
        if batch.leases:
            self.telemetry.count("claimed", queue_name, len(batch.leases))
        return batch

    # -- lease operations ----------------------------------------------------------------

    @budgeted
    def renew(self, lease: QueueLease) -> Optional[QueueLease]:
        """Extend an owned lease to min(now + lease_duration, claim start +
        max_lease_lifetime). Returns the new lease, or None (and changes nothing) when
        the lease is no longer owned or the lifetime is used up. Never shortens a lease;
        does not count as an attempt.

        Fenced by the lease, so it may be repeated. A lost reply: the row is read back
        and the renewal answered as done when it holds this lease's token and the new
        expiry, else it is sent again (it changes nothing once the lease is lost)."""
        now_us = self._now_us()
        target_us = min(now_us + self._lease_us, lease._claimed_at_us + self._lifetime_us)
        if target_us <= now_us:
            return None
        target_ms = ceil_ms(target_us)
        now_ms = floor_ms(now_us)
        token = lease._token
        matched = self._fenced(
            self._sql.renew, (target_ms, now_ms, lease._id_text(), token, now_ms, target_ms),
            lease._id_text(), lambda row: row[0] == LEASED and row[1] == token
            and row[2] is not None and int(row[2]) == target_ms)
        if matched != 1:
            return None
        return dataclasses.replace(lease, expires_at=from_ms(target_ms))

    @budgeted
    def complete(self, lease: QueueLease) -> bool:
        """Mark an owned lease's job COMPLETED. False (nothing changed) if not owned.

        Fenced by the lease, so it may be repeated (a repeat answers False). A lost
        reply: the row is read back, and True when it is COMPLETED by this call's write,
        else the completion is sent again."""
        done = self._complete_raw(lease, floor_ms(self._now_us()))
        if done:
            self.telemetry.count("completed", lease.context.queue)
        return done

    def _complete_raw(self, lease: QueueLease, now_ms: int) -> bool:
        ident = lease._id_text()
        return self._fenced(self._sql.complete, (now_ms, now_ms, ident, lease._token, now_ms),
                            ident, left_as(COMPLETED, now_ms, lease, lease.attempt),
                            self._then(lease, COMPLETED, now_ms)) == 1

    @budgeted
    def complete_many(self, leases: Sequence[QueueLease]) -> List[bool]:
        """Complete a batch of leases, one statement per up to 100 leases; element i of
        the result says whether ``leases[i]`` was acknowledged. Each row is fenced by
        its own token and an unexpired lease, exactly as :meth:`complete`: a stale
        lease is answered False, changes nothing and does not hold back the others.

        A lost reply: which of the batch's rows this call completed is read back (each
        COMPLETED by this call's write), and the others are completed one by one, as
        :meth:`complete` does (fenced: only those still owned change)."""
        leases = list(leases)
        for lease in leases:
            if not isinstance(lease, QueueLease):
                raise InvalidField("leases", f"must hold QueueLease values, got {lease!r}")
        results = [False] * len(leases)
        now_ms = floor_ms(self._now_us())
        pending: List[int] = []
        repeats: List[int] = []
        seen: Set[str] = set()
        for index, lease in enumerate(leases):
            ident = lease._id_text()
            # Two leases of one job cannot share a statement (one CASE arm per id);
            # at most one of them is owned, so a repeat is settled on its own, after.
            # A chain's or batch's job completes on its own too, with its follow-up
            # (caravel_lite.workflows): told from the options the claim read.
            options = lease._job_options
            (repeats if ident in seen or (options is not None and MARKER in options)
             else pending).append(index)
            seen.add(ident)
        for start in range(0, len(pending), COMPLETE_CHUNK):
            chunk = pending[start:start + COMPLETE_CHUNK]
            group = [leases[i] for i in chunk]
            done = self._complete_group(group, now_ms)
            for index, lease in zip(chunk, group):
                if lease._id_text() in done:
                    results[index] = True
                    self.telemetry.count("completed", lease.context.queue)
        for index in repeats:
            results[index] = self.complete(leases[index])
        return results

    def _complete_group(self, group: List[QueueLease], now_ms: int) -> Set[str]:
        if len(group) == 1:
            lease = group[0]
            return {lease._id_text()} if self._complete_raw(lease, now_ms) else set()
        ids = [lease._id_text() for lease in group]
        params: List[Any] = [now_ms, now_ms, *ids, now_ms]
        for lease in group:
            params += (lease._id_text(), lease._token)
        def recover() -> Set[str]:
            by_id = {lease._id_text(): lease for lease in group}
            done = {row[0] for row in self.db.execute_sql(
                self._batch.completed_at(len(ids)), (*ids, now_ms)).fetchall()
                if claimed_by(by_id[row[0]], row[1], row[2], by_id[row[0]].attempt)}
            return done | {lease._id_text() for lease in group
                           if lease._id_text() not in done
                           and self._complete_raw(lease, now_ms)}

        if self.dialect.update_returning:
            sql = self._batch.complete_many_returning(len(group))

            def returning() -> Set[str]:
                return {row[0] for row in self.db.execute_sql(sql, params).fetchall()}
            return recovering(self.dialect, self.db, returning, recover)
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

        def settle() -> Set[str]:
            if retrying(self.dialect, self.db, all_or_nothing):
                return set(ids)
            return {lease._id_text() for lease in group if self._complete_raw(lease, now_ms)}
        return recovering(self.dialect, self.db, settle, recover)

    @budgeted
    def fail(self, lease: QueueLease, failure: Failure, *,
             error: Optional[BaseException] = None) -> bool:
        """Record a failed attempt of an owned lease: back to PENDING after the backoff
        delay (rounded up to the millisecond), or DEAD_LETTER when its attempts are used
        up, or at once for ``Failure.DISCARDED``. Stores the category and, in the job's
        failure history, the attempt and, given ``error``, its type and raise site
        (never its message; a text only from ``QueueOptions.describe_failure``). False
        (nothing changed) if not owned.

        Fenced by the lease, so it may be repeated (a repeat answers False and writes
        no second history row). A lost reply: the row is read back, and True when it
        holds this call's write, else the failure is sent again. A job with a cancel
        request (:mod:`caravel_lite.cancel`) is neither retried nor dead-lettered: it ends
        CANCELLED (True)."""
        if not isinstance(failure, Failure):
            raise InvalidField("failure", f"must be a caravel_lite.Failure, got {failure!r}")
        if error is not None and not isinstance(error, BaseException):
            raise InvalidField("error", f"must be an exception, got {type(error).__name__}")
        info = recorded(failures.describe(error, self.options.describe_failure), error,
                        self.options)
        now_us = self._now_us()
        now_ms = floor_ms(now_us)
        queue = lease.context.queue
        ident = (lease._id_text(), lease._token, now_ms)
        params: Tuple[Any, ...]
        # DISCARDED means no retry can help: dead-lettered whatever attempts are left.
        if lease.attempt >= lease._max_attempts or failure is Failure.DISCARDED:
            sql, params = self._sql.dead_letter, (failure.value, now_ms, now_ms) + ident
            outcome = "deadlettered"
        else:
            due_ms = ceil_ms(now_us + backoff_micros(self.options, lease.attempt,
                                                     job_options.of_lease(lease)))
            sql, params = self._sql.retry, (due_ms, failure.value, now_ms) + ident
            outcome = "retried"
        state = DEAD if outcome == "deadlettered" else PENDING
        left = left_as(state, now_ms, lease, lease.attempt, failure.value)

        then = self._then(lease, DEAD, now_ms) if state == DEAD else None

        def record() -> bool:
            return self._failures.fail(sql, params, ident[0], lease.attempt, failure.value,
                                       info, now_ms, then)

        def recover() -> bool:
            # The failure and its history row are one transaction: the row in the
            # failed state by this call's write means both were kept.
            row = self.db.execute_sql(self._sql.settled, (ident[0],)).fetchone()
            return (row is not None and left(row)) or record()

        changed = recovering(self.dialect, self.db, record, recover)
        if not changed:  # a cancel request holds the retry back: the job ends CANCELLED
            return self.end_cancelled(lease)
        self.telemetry.count("failed", queue, failure=failure.value)
        self.telemetry.count(outcome, queue, failure=failure.value)
        return True

    @budgeted
    def release(self, lease: QueueLease) -> bool:
        """Hand back an owned job that was claimed but never run (a worker stopping
        with prefetched jobs): PENDING again, the claim's attempt given back, its due
        time and last failure unchanged, the lease cleared. False (nothing changed)
        when the lease is no longer owned. Counted as ``released``.

        Fenced by the lease, so it may be repeated (a repeat answers False). A lost
        reply: the row is read back, and True when it is PENDING by this call's write,
        else the release is sent again. A job with a cancel request ends CANCELLED
        instead (True)."""
        if not isinstance(lease, QueueLease):
            raise InvalidField("lease", f"must be a QueueLease, got {lease!r}")
        now_ms = floor_ms(self._now_us())
        ident = lease._id_text()
        released = self._fenced(self._sql.release, (now_ms, ident, lease._token, now_ms),
                                ident, left_as(PENDING, now_ms, lease, lease.attempt - 1)) == 1
        if not released:  # held back by a cancel request (caravel_lite.cancel)
            return self.end_cancelled(lease)
        self.telemetry.count("released", lease.context.queue)
        return True

    @budgeted
    def snooze(self, lease: QueueLease, delay: timedelta) -> bool:
        """Put an owned job back to PENDING due ``delay`` from now (rounded up to the
        millisecond), with the claim's attempt given back and its last failure
        unchanged: what a handler raising :class:`caravel_lite.Snooze` gets. False
        (nothing changed) when the lease is no longer owned. Counted as ``snoozed``.

        Fenced by the lease, so it may be repeated (a repeat answers False). A lost
        reply: the row is read back, and True when it is PENDING by this call's write,
        else the snooze is sent again. A job with a cancel request ends CANCELLED
        instead (True)."""
        if not isinstance(lease, QueueLease):
            raise InvalidField("lease", f"must be a QueueLease, got {lease!r}")
        if not isinstance(delay, timedelta) or delay < timedelta(0):
            raise InvalidField("delay", f"must be a timedelta >= 0, got {delay!r}")
        now_us = self._now_us()
        now_ms = floor_ms(now_us)
        due_ms = ceil_ms(now_us + duration_micros(delay))
        ident = lease._id_text()
        snoozed = self._fenced(self._sql.snooze, (due_ms, now_ms, ident, lease._token, now_ms),
                               ident, left_as(PENDING, now_ms, lease, lease.attempt - 1)) == 1
        if not snoozed:  # held back by a cancel request (caravel_lite.cancel)
            return self.end_cancelled(lease)
        self.telemetry.count("snoozed", lease.context.queue)
        return True

    @budgeted
    def reclaim_expired(self, queue: str) -> int:
        """Sweep ``queue`` now: expired leases with attempts left become claimable again
        (last failure LEASE_EXPIRED), the others DEAD_LETTER. Returns how many moved.
        Its statements are fenced on the rows' state and expiry: after a lost reply
        they are sent again and match nothing already moved (the count then leaves
        out what the lost run moved)."""
        validation.check_queue(queue)
        dead, reclaimed = self._claimer.sweep(queue, floor_ms(self._now_us()))
        return dead + reclaimed
