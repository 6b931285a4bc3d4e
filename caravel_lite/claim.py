"""Claiming: how the due jobs of one queue become leases, by the best path the database
offers (:attr:`caravel_lite.dialect.Dialect.claim_method`).

- RETURNING (SQLite, PostgreSQL): one UPDATE ... RETURNING over the best candidates;
  PostgreSQL skips rows another claim has locked, SQLite runs it under its one write
  lock.
- LOCKED_READ (MariaDB 10.6+, MySQL 8.0.1+): a short transaction reads the best
  candidates ``FOR UPDATE SKIP LOCKED`` and leases them with one UPDATE.
- PORTABLE (older servers): a plain read of candidates, then one UPDATE fenced on each
  row's observed state; a lost race moves on to the next candidates for a bounded
  number of rounds.

Every path sweeps expired leases of the queue first, and every claim is an attempt.

A claim's lease token is chosen before its statement is sent. When the reply is lost
(the connection dropped after the server may have committed), the claim reads back the
rows holding its token on a new connection and returns those as its leases; only when
none holds it (nothing was committed) is the claim run again, under the same token. So
a lost reply neither orphans leased rows nor spends an attempt of a job no handler
gets. SQLite runs in-process and cannot lose a reply.
"""
from __future__ import annotations

import secrets
from typing import Any, Callable, List, Optional, Sequence, Set, Tuple

import peewee

from caravel_lite import ids
from caravel_lite.clock import from_ms
from caravel_lite.dialect import ClaimMethod, Dialect
from caravel_lite.logfields import fields
from caravel_lite.observability import Telemetry, logger
from caravel_lite.retry import recovering
from caravel_lite.statements import BatchStatements, Statements
from caravel_lite.values import ClaimBatch, Failure, JobContext, QueueLease

# How many due candidates one portable claim round reads beyond the limit; losing the
# race for one moves on to the next, and a claim gives up after CLAIM_ROUNDS rounds.
CANDIDATES = 4
CLAIM_ROUNDS = 3


def _claim_order(row: Sequence[Any]) -> Tuple[Any, ...]:
    # (id, attempts, tenant, wire, payload, max_attempts, priority, available_at,
    # enqueued_at): priority, due time, enqueue time, then id as the tie-breaker.
    return (row[6], row[7], row[8], row[0])


class Claimer:
    """Leases jobs and sweeps expired leases for one :class:`DatabaseQueue` (its
    database, dialect, prepared statements and telemetry)."""

    def __init__(self, db: peewee.Database, dialect: Dialect, sql: Statements,
                 batch: BatchStatements, telemetry: Telemetry) -> None:
        self.db = db
        self.dialect = dialect
        self._sql = sql
        self._batch = batch
        self.telemetry = telemetry
        # Ends a sweep's batch members with their batch's count first (set by the
        # queue: caravel_lite.workflows.sweep).
        self.before_sweep: Optional[Callable[[str, int], int]] = None
        self._claim = {ClaimMethod.RETURNING: self._claim_returning,
                       ClaimMethod.LOCKED_READ: self._claim_locked,
                       ClaimMethod.PORTABLE: self._claim_portable}[dialect.claim_method]

    def _fenced(self, sql: str, params: Sequence[Any]) -> int:
        """Run a conditional UPDATE of the sweep, retrying lock conflicts; returns rows
        matched. Fenced on the rows' state and expiry: after a lost reply it is run
        again, and matches nothing if the first run committed (its count is then 0)."""
        def run() -> int:
            return int(self.db.execute_sql(sql, params).rowcount)
        return recovering(self.dialect, self.db, run, run)

    def _rows(self, sql: str, params: Sequence[Any]) -> List[Sequence[Any]]:
        return list(self.db.execute_sql(sql, params).fetchall())

    def _read(self, sql: str, params: Sequence[Any]) -> List[Sequence[Any]]:
        """A plain read, read again on a new connection when its reply was lost."""
        def run() -> List[Sequence[Any]]:
            return self._rows(sql, params)
        return recovering(self.dialect, self.db, run, run)

    def _held(self, queue_name: str, token: str) -> List[Sequence[Any]]:
        """The rows of ``queue_name`` leased under ``token`` (LEASE_COLUMNS)."""
        return self._rows(self._sql.leased_by_token, (queue_name, token))

    # -- the sweep of expired leases ----------------------------------------------------

    def sweep(self, queue_name: str, now_ms: int) -> Tuple[int, int]:
        """Dead-letter expired leases with no attempts left; make the others claimable.
        A plain read first, so the usual case takes no write lock."""
        if not self._read(self._sql.expired_exists, (queue_name, now_ms)):
            return 0, 0
        return self.sweep_expired(queue_name, now_ms)

    def sweep_expired(self, queue_name: str, now_ms: int) -> Tuple[int, int]:
        early = 0
        if self.before_sweep is not None:  # batch members first (caravel_lite.workflows)
            early = self.before_sweep(queue_name, now_ms)
        # A cancel request outlives its worker: the expired lease ends CANCELLED.
        cancelled = self._fenced(self._sql.sweep_cancelled, (now_ms, now_ms, queue_name, now_ms))
        if cancelled:
            self.telemetry.count("cancelled", queue_name, cancelled)
            logger.warning("%d expired lease(s) on queue %s cancelled as requested",
                           cancelled, queue_name,
                           extra=fields(queue=queue_name, count=cancelled, reason="cancel"))
        dead = self._fenced(self._sql.sweep_exhausted, (now_ms, now_ms, queue_name, now_ms))
        reclaimed = self._fenced(self._sql.sweep_reclaimable, (now_ms, queue_name, now_ms))
        if dead:
            self.telemetry.count("deadlettered", queue_name, dead,
                                 Failure.ATTEMPTS_EXHAUSTED.value)
            logger.warning("%d expired lease(s) on queue %s dead-lettered: attempts exhausted",
                           dead, queue_name,
                           extra=fields(queue=queue_name, count=dead,
                                        category=Failure.ATTEMPTS_EXHAUSTED))
        if reclaimed:
            # A worker that stopped renewing (crashed, partitioned, hung) held these;
            # the claims that follow take them over, each with an attempt spent.
            logger.warning("%d expired lease(s) on queue %s taken over: claimable again "
                           "(last failure lease_expired)", reclaimed, queue_name,
                           extra=fields(queue=queue_name, count=reclaimed,
                                        category=Failure.LEASE_EXPIRED))
        return dead + cancelled + early, reclaimed  # both final

    # -- claiming ---------------------------------------------------------------------

    def claim(self, queue_name: str, limit: int, now_us: int, now_ms: int,
              expires_ms: int, token: Optional[str] = None) -> ClaimBatch:
        """Up to ``limit`` leases, best first (inputs already validated), all under
        ``token`` when given (else a fresh one)."""
        return self._claim(queue_name, limit, now_us, now_ms, expires_ms,
                           token or secrets.token_hex(16))

    def held(self, queue_name: str, token: str, expires_ms: int,
             now_us: int) -> List[QueueLease]:
        """The leases of the rows of ``queue_name`` still leased under ``token``."""
        return [self._lease(queue_name, row, row[1], token, expires_ms, now_us)
                for row in self._read(self._sql.leased_by_token, (queue_name, token))]

    def _lease(self, queue_name: str, row: Sequence[Any], attempt: int, token: str,
               expires_ms: int, now_us: int) -> QueueLease:
        job_id, _, tenant_id, wire_name, payload, max_attempts = row[:6]
        ident = ids.from_text(job_id)
        return QueueLease(ident, attempt, from_ms(expires_ms),
                          JobContext(ident, queue_name, tenant_id, attempt), wire_name,
                          payload, token, now_us, max_attempts, str(job_id), row[9])

    def _claim_returning(self, queue_name: str, limit: int, now_us: int, now_ms: int,
                         expires_ms: int, token: str) -> ClaimBatch:
        """One UPDATE ... RETURNING takes the best due rows. It claims nothing while the
        queue holds an expired lease; then the sweep runs and the claim is repeated
        once (whatever the sweep's counts say: after a lost reply its repeat counts 0
        for the rows the lost run moved). Rows skipped as locked belong to another
        claim that is taking them, so an empty answer means nothing was free: never
        ``contended``."""
        sql = self._batch.claim_returning(limit)
        for _ in range(2):  # the second after a sweep: the first took nothing
            params = (queue_name, now_ms, token, expires_ms, now_ms, now_ms, queue_name,
                      now_ms)

            def claim() -> List[Sequence[Any]]:
                return self._rows(sql, params)

            def recover() -> List[Sequence[Any]]:
                return self._held(queue_name, token) or claim()

            rows = recovering(self.dialect, self.db, claim, recover)
            if rows:
                rows.sort(key=_claim_order)
                # RETURNING shows the row after the update: attempts counts this claim.
                return ClaimBatch(tuple(self._lease(queue_name, row, row[1], token,
                                                    expires_ms, now_us) for row in rows),
                                  False)
            if not self._read(self._sql.expired_exists, (queue_name, now_ms)):
                break
            self.sweep_expired(queue_name, now_ms)
        return ClaimBatch((), False)

    def _claim_locked(self, queue_name: str, limit: int, now_us: int, now_ms: int,
                      expires_ms: int, token: str) -> ClaimBatch:
        """Sweep if a lease expired, then one short transaction: read the best due rows
        ``FOR UPDATE SKIP LOCKED`` and lease them. The rows stay locked by this
        transaction from the read to the commit, so the UPDATE takes every one of them;
        it is still fenced like the portable path's, which makes a surprise visible
        instead of silent. Like RETURNING, never ``contended``."""
        self.sweep(queue_name, now_ms)
        read = self._batch.claim_locked(limit)

        def transaction() -> List[QueueLease]:
            with self.db.atomic():
                rows = self._rows(read, (queue_name, now_ms))
                if not rows:
                    return []
                return self._take(queue_name, sorted(rows, key=_claim_order), now_us,
                                  now_ms, expires_ms, token)

        def recover() -> List[QueueLease]:
            # The COMMIT's reply may be what was lost: the rows holding the token are
            # this claim's. The UPDATE added one to each row's attempts.
            held = sorted(self._held(queue_name, token), key=_claim_order)
            if not held:
                return transaction()
            return [self._lease(queue_name, row, row[1], token, expires_ms, now_us)
                    for row in held]

        return ClaimBatch(tuple(recovering(self.dialect, self.db, transaction, recover)),
                          False)

    def _claim_portable(self, queue_name: str, limit: int, now_us: int, now_ms: int,
                        expires_ms: int, token: str) -> ClaimBatch:
        """Read the best due candidates (and whether any lease expired) in one
        statement, then take them with one UPDATE fenced on each row's observed state;
        a lost race moves on to the next candidates, for a bounded number of rounds.
        ``contended`` when candidates were seen and every one was lost."""
        read = self._batch.claim_read(limit + CANDIDATES - 1)
        leases: List[QueueLease] = []
        tried: Set[str] = set()
        swept = False
        params = (queue_name, now_ms, queue_name, now_ms)
        for _ in range(CLAIM_ROUNDS):
            rows = self._read(read, params)
            if not swept and any(row[0] == 1 for row in rows):
                swept = True
                self.sweep_expired(queue_name, now_ms)
                rows = self._read(read, params)
            candidates = sorted((row[1:] for row in rows if row[0] == 0
                                 and row[1] not in tried), key=_claim_order)
            if not candidates:
                break
            while candidates and len(leases) < limit:
                batch = candidates[:limit - len(leases)]
                del candidates[:len(batch)]
                tried.update(row[0] for row in batch)
                leases += self._take(queue_name, batch, now_us, now_ms, expires_ms, token)
            if len(leases) >= limit:
                break
        return ClaimBatch(tuple(leases), bool(tried) and not leases)

    def _take(self, queue_name: str, rows: List[Sequence[Any]], now_us: int, now_ms: int,
              expires_ms: int, token: str = "") -> List[QueueLease]:
        """Lease the observed candidate ``rows`` with one UPDATE fenced on each row's
        state and attempt count, under ``token`` (a fresh one when not given); returns
        the leases of the rows it took. Run inside a transaction (LOCKED_READ), a lost
        reply is the transaction's to recover; alone (PORTABLE), the rows holding the
        token are read back."""
        token = token or secrets.token_hex(16)
        ids = [row[0] for row in rows]
        if len(rows) == 1:
            sql = self._sql.take
            params: List[Any] = [token, expires_ms, now_ms, now_ms, ids[0], rows[0][1],
                                 now_ms]
        else:
            sql = self._batch.take_many(len(rows))
            params = [token, expires_ms, now_ms, now_ms, *ids, now_ms]
            for row in rows:
                params += (row[0], row[1])

        def held() -> Set[str]:
            return {row[0] for row in self._rows(self._batch.taken_ids(len(ids)),
                                                 (*ids, token))}

        def take() -> Set[str]:
            matched = int(self.db.execute_sql(sql, params).rowcount)
            if matched == len(rows):
                return set(ids)
            if matched == 0:
                return set()
            return held()  # some were lost to another claim: which rows hold our token

        def recover() -> Set[str]:
            # Fenced on the observed attempt counts: a repeat after a committed first
            # run would match nothing, so what holds the token answers first.
            return held() or take()

        taken = recovering(self.dialect, self.db, take, recover)
        # The UPDATE was fenced on the observed attempt count: each taken row is now at +1.
        return [self._lease(queue_name, row, row[1] + 1, token, expires_ms, now_us)
                for row in rows if row[0] in taken]
