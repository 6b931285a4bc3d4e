"""Debouncing: ``Dispatch(debounce=window, debounce_key=K)``.

While a job with the same (queue, tenant, K) is pending and has never started, an
enqueue replaces its type, payload and options and moves its due time to now + window:
the last call wins, and the job runs once the calls stop for the window. Once it
started (leased, retried, finished), the next enqueue makes a new debounced job.

One pending holder per key is the unique dedup index's doing: a debounced job stores
the digest of (queue, tenant, K, "debounce") as its dedup key. An enqueue, in one
transaction, first rewrites the holder (an UPDATE fenced on ``state = 'pending' AND
attempts = 0``); when none matched, it takes the key away from a holder that started
(so the index lets a new one in) and inserts a new job. Two processes enqueueing at
once: one INSERT wins, the other meets the unique index, rolls its transaction back and
starts again, now rewriting the winner. A claim never runs a payload older than the one
it leased: every rewrite also moves the due time past now, and every claim re-checks
``available_at <= now`` on the row it takes.
"""
from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple

import peewee

from caravel_lite.envelope import Envelope
from caravel_lite.errors import InvalidField
from caravel_lite.retry import recovering
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import EnqueueResult, JobState

if TYPE_CHECKING:
    from caravel_lite.dialect import Dialect

__all__ = ["Debouncer", "refuse_debounced"]

# Rounds of rewrite-or-insert before the unique index's verdict is raised: each lost
# round means another writer inserted the holder in between, which the next round
# rewrites, so a second loss needs the new holder to start within the same moment.
ATTEMPTS = 5
_PENDING = JobState.PENDING.value


def refuse_debounced(envelopes: Sequence[Envelope], where: str) -> None:
    """Calls that write many jobs at once (enqueue_many, chains, batches) take no
    debounced job: a debounce is one job's rewrite, decided against what is stored."""
    if any(envelope.debounce_us is not None for envelope in envelopes):
        raise InvalidField("debounce", f"{where} does not debounce: enqueue a debounced "
                           f"job with queue.enqueue")


class Debouncer:
    """The debounced enqueue of one queue's database."""

    def __init__(self, db: peewee.Database, dialect: Dialect,
                 insert: Callable[[Envelope, uuid.UUID, int], Tuple[str, Tuple[Any, ...]]]) -> None:
        p = db.param
        t = JOBS_TABLE
        self.db = db
        self.dialect = dialect
        self._insert = insert  # (envelope, id, now_ms) -> the plain enqueue's INSERT
        unstarted = f"dedup_key = {p} AND state = '{_PENDING}' AND attempts = 0"
        # params: wire_name, payload, options, priority, max_attempts, due, now, key
        self._rewrite = (f"UPDATE {t} SET wire_name = {p}, payload = {p}, job_options = {p}, "
                         f"priority = {p}, max_attempts = {p}, available_at = {p}, "
                         f"updated_at = {p} WHERE {unstarted}")
        self._holder = f"SELECT id FROM {t} WHERE {unstarted}"
        # A holder that started keeps its run; only the key is taken from it.
        # params: now, key
        self._retire = (f"UPDATE {t} SET dedup_key = NULL, updated_at = {p} "
                        f"WHERE dedup_key = {p} AND (state <> '{_PENDING}' OR attempts > 0)")

    def write(self, envelope: Envelope, job_id: uuid.UUID, now_ms: int) -> EnqueueResult:
        """Rewrite the key's unstarted holder, or insert ``job_id``; the answer names
        the job that now carries the call (``already_enqueued``: an existing one).

        A lost reply is recovered by doing it again: a rewrite is the same rewrite
        (the window restarts from the repeat), and an insert whose commit was lost
        either stands (then the repeat rewrites it) or is written again."""
        assert envelope.dedup_key is not None
        key = envelope.dedup_key
        rewrite = (envelope.wire_name, envelope.payload, envelope.options,
                   int(envelope.priority), envelope.max_attempts, envelope.available_at_ms,
                   now_ms, key)

        def once() -> Optional[EnqueueResult]:
            try:
                with self.dialect.write_transaction(self.db):
                    self.db.execute_sql(self._rewrite, rewrite)
                    # Read rather than trust the row count: MariaDB counts a row the
                    # rewrite left as it was (the same call twice in a millisecond)
                    # as unchanged.
                    row = self.db.execute_sql(self._holder, (key,)).fetchone()
                    if row is not None:
                        return EnqueueResult(uuid.UUID(str(row[0])), True)
                    self.db.execute_sql(self._retire, (now_ms, key))
                    sql, params = self._insert(envelope, job_id, now_ms)
                    self.db.execute_sql(sql, params)
            except peewee.IntegrityError:
                return None  # another writer's holder got in first: rewrite it
            return EnqueueResult(job_id, False)

        for _ in range(ATTEMPTS):
            result = recovering(self.dialect, self.db, once, once)
            if result is not None:
                return result
        raise peewee.IntegrityError(f"debounce key kept changing hands over {ATTEMPTS} "
                                    f"attempts")
