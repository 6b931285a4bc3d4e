"""Debouncing: ``Dispatch(debounce=window, debounce_key=K)``.

While a job with the same (queue, tenant, K) is pending and has never started, an
enqueue replaces its type, payload and options and moves its due time to now + window:
the last call wins, and the job runs once the calls stop for the window. Once it
started (leased, retried, finished), the next enqueue makes a new debounced job.

One pending holder per key is the unique dedup index's doing: a debounced job stores
the digest of (queue, tenant, K, "debounce") as its dedup key. An enqueue, in one
transaction, reads and locks the holder (``state = 'pending' AND attempts = 0``) and
rewrites it; when there is none, it takes the key away from a holder that started (so
the index lets a new one in) and inserts a new job. Two processes enqueueing at once:
one INSERT wins, the other meets the unique index, rolls its transaction back and
starts again, now rewriting the winner. A claim never runs a payload older than the one
it leased: every rewrite also moves the due time past now, and every claim re-checks
``available_at <= now`` on the row it takes. "Now" is when the rewrite is sent, under
the holder's lock, not when the call began: a call's repeats (a lost reply's recovery,
a round lost to another writer) may come later than the window, and a due time
computed at the start would then be past already, letting a claim that read the
holder before the repeat lease it after, with the payload it had read.

Nothing is run twice because a reply was lost. Each call chooses its job id before
anything is sent, as a plain enqueue does, and writes it as its token on the row it
writes, inserted or rewritten, in the ``idempotency_key`` column (which a debounced job
has no other use for: ``debounce`` excludes ``idempotency_key``; so a debounced job's
idempotency key, as listings show it, is the id of the call that last wrote it). When
the reply of the COMMIT is lost, the call's recovery looks before it writes again: the
holder under its own id or carrying its token is its answer (its write landed); a
holder it rewrote that now carries another token than it had then was written since,
by this call or by a later one (whose payload, the last, runs), so it carries the call
whether it started or not; only the token it had then means the COMMIT rolled back,
and the call writes again (into a new job when that holder started meanwhile). A
COMMIT that reaches the server after the recovery began keeps what it wrote locked
until then (the holder it rewrote, the key it inserted), so the recovery waits for it
and then finds its write.

A caller's own retry (the call raised, and the caller calls again with the same
arguments) is a new call, with a new token: the library cannot tell it from one. While
the holder is pending it merges into it, as any call does; once the holder started it
makes a new job, as any call after a start does: debouncing promises a run after the
last call, and the started run began before this one. What a call that raised wrote
is unknown only where the library's recovery could not finish (the connection still
down when the call's retry budget ran out, a ``bounded`` block cutting it short) or
does not apply (inside the caller's transaction, which is the caller's to learn
about): a caller that wants at most one run for the call does not retry then, one that
wants at least one retries.
"""
from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple

import peewee

from caravel_lite.clock import ceil_ms, floor_ms
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


class _Unsettled:
    """What a call's COMMITs whose reply was lost may have written: the holder it
    rewrote (and the token the holder carried before), and whether it inserted its own
    job. A new call starts with nothing."""

    __slots__ = ("rewritten", "inserted")

    def __init__(self) -> None:
        self.rewritten: Optional[Tuple[str, Optional[str]]] = None
        self.inserted = False


_GONE = object()  # a holder deleted since (an operator's delete, a prune)


class Debouncer:
    """The debounced enqueue of one queue's database."""

    def __init__(self, db: peewee.Database, dialect: Dialect,
                 insert: Callable[[Envelope, uuid.UUID, int], Tuple[str, Tuple[Any, ...]]],
                 now_us: Callable[[], int]) -> None:
        p = db.param
        t = JOBS_TABLE
        self.db = db
        self.dialect = dialect
        self._insert = insert  # (envelope, id, now_ms) -> the plain enqueue's INSERT
        self._now_us = now_us  # the queue's clock, read again for each rewrite
        unstarted = f"dedup_key = {p} AND state = '{_PENDING}' AND attempts = 0"
        # The holder and the call that last wrote it, locked until the transaction ends:
        # a claim cannot take it between this read and the rewrite.
        lock = f" {dialect.row_lock}" if dialect.row_lock else ""
        self._holder = f"SELECT id, idempotency_key FROM {t} WHERE {unstarted}{lock}"
        # params: wire_name, payload, options, priority, max_attempts, due, token, now, id
        self._rewrite = (f"UPDATE {t} SET wire_name = {p}, payload = {p}, job_options = {p}, "
                         f"priority = {p}, max_attempts = {p}, available_at = {p}, "
                         f"idempotency_key = {p}, updated_at = {p} WHERE id = {p}")
        self._written_by = f"SELECT idempotency_key FROM {t} WHERE id = {p}"
        # A holder that started keeps its run; only the key is taken from it.
        # params: now, key
        self._retire = (f"UPDATE {t} SET dedup_key = NULL, updated_at = {p} "
                        f"WHERE dedup_key = {p} AND (state <> '{_PENDING}' OR attempts > 0)")

    def write(self, envelope: Envelope, job_id: uuid.UUID, now_ms: int) -> EnqueueResult:
        """Rewrite the key's unstarted holder, or insert ``job_id``; the answer names
        the job that now carries the call (``already_enqueued``: an existing one).

        ``job_id`` is also the call's token, written on every row the call writes. A
        lost reply is recovered by doing it again in view of what the lost COMMIT may
        have written (:meth:`_settled`): a write of this call's that landed, or a
        holder a later call rewrote since, is the answer; otherwise nothing landed and
        the repeat writes."""
        assert envelope.dedup_key is not None
        key = envelope.dedup_key
        own = str(job_id)
        fields = (envelope.wire_name, envelope.payload, envelope.options,
                  int(envelope.priority), envelope.max_attempts)
        window_us = envelope.debounce_us
        assert window_us is not None
        new_row = envelope._replace(idempotency_key=own)
        unsettled = _Unsettled()

        def once() -> Optional[EnqueueResult]:
            try:
                with self.dialect.write_transaction(self.db):
                    holder = self.db.execute_sql(self._holder, (key,)).fetchone()
                    settled = self._settled(holder, own, unsettled)
                    if settled is not None:
                        return settled
                    if holder is not None:
                        holder_id = str(holder[0])
                        # Due a window after this write (the holder locked), never
                        # earlier than the call's own start made it.
                        write_us = self._now_us()
                        due = max(envelope.available_at_ms, ceil_ms(write_us + window_us))
                        self.db.execute_sql(self._rewrite, fields + (
                            due, own, max(now_ms, floor_ms(write_us)), holder_id))
                        # Recorded before the COMMIT: its reply may be what is lost.
                        unsettled.rewritten = (holder_id, holder[1])
                        result = EnqueueResult(uuid.UUID(holder_id), True)
                    else:
                        self.db.execute_sql(self._retire, (now_ms, key))
                        sql, params = self._insert(new_row, job_id, now_ms)
                        self.db.execute_sql(sql, params)
                        unsettled.rewritten, unsettled.inserted = None, True
                        result = EnqueueResult(job_id, False)
            except peewee.IntegrityError:
                # Another writer's holder got in first (rewrite it), or this call's own
                # lost INSERT committed after all (the next round finds it).
                return None
            return result

        for _ in range(ATTEMPTS):
            result = recovering(self.dialect, self.db, once, once)
            if result is not None:
                return result
        raise peewee.IntegrityError(f"debounce key kept changing hands over {ATTEMPTS} "
                                    f"attempts")

    def _settled(self, holder: Optional[Tuple[Any, ...]], own: str,
                 unsettled: _Unsettled) -> Optional[EnqueueResult]:
        """The call's answer when it needs no write (read in the transaction, after the
        holder's lock), else None. Only a call whose COMMIT reply was lost reads more
        than the holder.

        A lost rewrite's holder carrying another token than it had before was written
        since the lost attempt began: by this call (the COMMIT landed), or by a later
        call after it (that call's payload is then the last one, landed or not). Either
        way the holder carries this call, started or not; so it does when it was
        deleted since (nothing is run twice for a row nobody can read any more). Still
        the token it had: the lost COMMIT rolled back, and the call writes again."""
        if holder is not None:
            if str(holder[0]) == own:
                return EnqueueResult(uuid.UUID(own), False)  # its own insert landed
            if holder[1] == own:
                return EnqueueResult(uuid.UUID(str(holder[0])), True)  # its rewrite did
        if unsettled.rewritten is not None:
            target, before = unsettled.rewritten
            if holder is not None and str(holder[0]) == target:
                now: object = holder[1]
            else:  # started since: the last writer is still on the row
                row = self.db.execute_sql(self._written_by, (target,)).fetchone()
                now = _GONE if row is None else row[0]
            if now != before:
                return EnqueueResult(uuid.UUID(target), True)
        if unsettled.inserted and \
                self.db.execute_sql(self._written_by, (own,)).fetchone() is not None:
            return EnqueueResult(uuid.UUID(own), False)  # landed, started since
        return None
