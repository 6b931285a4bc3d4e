"""Slots: how a concurrency or rate limit is enforced by the database, across every
worker and process, with conditional UPDATEs of single rows (no advisory locks, no
locking reads).

A limit of N is N rows of ``caravel_slots`` under one scope (created when first
taken, the primary key settling who creates one). A job starts only after taking one
of them, under the claim's lease token:

- **Concurrency** (N leased at once per key): a slot is free when the lease it was
  taken for is over: its job is no longer leased under that token with an unexpired
  lease (completed, failed, released, snoozed, taken over: its row was written after
  the slot was taken and holds another token or none), or the claim's lease expiry
  has passed and the job is not leased under that token past it (a lease that expires
  frees its slot; one that is renewed keeps it). The slot is never released
  explicitly, so no acknowledgement path changes and a worker killed at any point
  leaves nothing to clean up: its slots free themselves when its leases expire.
- **Rate** (N starts per period): a slot is free once ``period`` has passed since it
  was last taken. So any window of ``period`` contains at most N starts (a sliding
  window, exact, not a fixed window's 2N at a boundary); a burst of N may start at
  once after a quiet period, then one more as each start leaves the window.

A slot taken for a job the claim then lost to another claimer is handed back at once
(``undo``); a claimer killed between the two leaves a rate slot spent and a
concurrency slot held until the claim's lease expiry, never an over-limit start.
"""
from __future__ import annotations

import contextlib
from typing import Any, List, Optional, Sequence, Tuple

import peewee

from caravel_lite.dialect import Dialect
from caravel_lite.limits import Gate
from caravel_lite.retry import recovering
from caravel_lite.schema import JOBS_TABLE, SLOTS_TABLE

Taken = Tuple[Gate, int]
# Free slots read per try; as many tries to create a new one.
READ = 3


class Slots:
    """Takes and hands back the slots of :class:`~caravel_lite.limits.Gate` s."""

    def __init__(self, db: peewee.Database, dialect: Dialect) -> None:
        self.db = db
        self.dialect = dialect
        p, s, j = db.param, SLOTS_TABLE, JOBS_TABLE
        # Params: now_ms, now_ms. The lease the slot was taken for is over: expired and
        # not renewed past now, or ended. Ended is read from the job's attempt count,
        # which its claim raised to the slot's ``attempt``, never from its state alone:
        # a read that saw the row as it was before that claim (a statement that began
        # before it committed) sees a lower count and an older write, so it never
        # takes a slot from a lease it could not see yet. A job handed back (release,
        # snooze) has its attempt given back and a later write; one handed back in the
        # very millisecond of its claim keeps the slot until the claim's expiry.
        self._lease_over = (
            f"(({s}.expires_at <= {p} AND NOT EXISTS (SELECT 1 FROM {j} WHERE "
            f"{j}.id = {s}.holder AND {j}.lease_token = {s}.token "
            f"AND {j}.state = 'leased' AND {j}.lease_expires_at > {p})) "
            f"OR EXISTS (SELECT 1 FROM {j} WHERE {j}.id = {s}.holder AND ("
            f"{j}.attempts > {s}.attempt "
            f"OR ({j}.attempts = {s}.attempt AND ({j}.lease_token IS NULL "
            f"OR {j}.lease_token <> {s}.token)) "
            f"OR ({j}.attempts < {s}.attempt AND {j}.updated_at > {s}.taken_at))))")
        # Params: now_ms - period_ms.
        self._window_passed = f"({s}.taken_at <= {p})"
        # The free slots, oldest taken first (the slots index: scope, taken_at): a rate
        # limit's free slots are a range of it, a concurrency limit's busy ones are at
        # most its leased jobs. Params: free's, scope, count.
        self._read = (f"SELECT slot FROM {s} WHERE {{free}} AND scope = {p} AND slot < {p} "
                      f"ORDER BY taken_at LIMIT {READ}")
        self._last = f"SELECT MAX(slot) FROM {s} WHERE scope = {p}"
        self._update = (f"UPDATE {s} SET holder = {p}, token = {p}, attempt = {p}, "
                        f"taken_at = {p}, expires_at = {p} WHERE scope = {p} AND slot = {p} "
                        f"AND {{free}}")
        self._insert = (f"INSERT INTO {s} (scope, slot, holder, token, attempt, taken_at, "
                        f"expires_at) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p})")
        self._owner = f"SELECT holder, token FROM {s} WHERE scope = {p} AND slot = {p}"
        self._undo = (f"UPDATE {s} SET holder = NULL, token = NULL, taken_at = 0, "
                      f"expires_at = 0 WHERE scope = {p} AND slot = {p} AND holder = {p} "
                      f"AND token = {p}")

    def _free(self, gate: Gate, now_ms: int) -> Tuple[str, Tuple[int, ...]]:
        if gate.period_ms is None:
            return self._lease_over, (now_ms, now_ms)
        return self._window_passed, (now_ms - gate.period_ms,)

    def take_all(self, gates: Sequence[Gate], holder: str, token: str, attempt: int,
                 now_ms: int, expires_ms: int, seen_ms: int = 0
                 ) -> Tuple[Optional[List[Taken]], Optional[Gate]]:
        """Take one slot of every gate, in order, for job ``holder`` under ``token``,
        whose claim will make it attempt ``attempt`` (its row last written at
        ``seen_ms``, as the claim read it):
        (the slots taken, None), or (None, the gate that had none free) after handing
        back the ones taken before it."""
        taken: List[Taken] = []
        for gate in gates:
            slot = self.take(gate, holder, token, attempt, now_ms, expires_ms, seen_ms)
            if slot is None:
                self.undo(taken, holder, token)
                return None, gate
            taken.append((gate, slot))
        return taken, None

    def take(self, gate: Gate, holder: str, token: str, attempt: int, now_ms: int,
             expires_ms: int, seen_ms: int = 0) -> Optional[int]:
        """The number of a slot of ``gate`` taken for ``holder``, or None if all are
        busy. Each try is one conditional UPDATE (or the INSERT of a slot never used),
        so two claimers never hold one slot; a lost reply reads the slot back (its
        holder and token say whether the lost write landed)."""
        free, free_params = self._free(gate, now_ms)
        # A concurrency slot is dated no earlier than the job's last write the claim
        # saw: a slot counts as free once the job is written after it was taken, and a
        # write stamped by a later clock (another process's hand-back, a sweep, landing
        # after this claim read its clock) would free it while the claim still leases.
        taken_ms = now_ms if gate.period_ms is not None else max(now_ms, seen_ms)
        values = (holder, token, attempt, taken_ms, expires_ms)
        for (slot,) in self.db.execute_sql(self._read.format(free=free),
                                           (*free_params, gate.scope, gate.count)).fetchall():
            if self._try(gate, int(slot), True, values, free, free_params):
                return int(slot)
        # None free: a slot never used yet, while the limit has one (they are numbered
        # from 0 as they are first taken; the primary key settles a race to create one).
        for _ in range(READ):
            (last,) = self.db.execute_sql(self._last, (gate.scope,)).fetchone()
            slot = 0 if last is None else int(last) + 1
            if slot >= gate.count:
                return None
            if self._try(gate, slot, False, values, free, free_params):
                return slot
        return None

    def _try(self, gate: Gate, slot: int, exists: bool, values: Tuple[Any, ...], free: str,
             free_params: Tuple[int, ...]) -> bool:
        def ours() -> bool:
            row = self.db.execute_sql(self._owner, (gate.scope, slot)).fetchone()
            return row is not None and (row[0], row[1]) == values[:2]

        def write() -> bool:
            if exists:
                sql = self._update.format(free=free)
                params = (*values, gate.scope, slot, *free_params)
                return int(self.db.execute_sql(sql, params).rowcount) == 1
            try:
                with self.db.savepoint() if self.db.in_transaction() else contextlib.nullcontext():
                    self.db.execute_sql(self._insert, (gate.scope, slot, *values))
            except peewee.IntegrityError:
                return False  # another claimer created it first
            return True

        def recover() -> bool:
            return ours() or write()

        return recovering(self.dialect, self.db, write, recover)

    def undo(self, taken: Sequence[Taken], holder: str, token: str) -> None:
        """Hand back slots taken for a job that did not start (fenced by holder and
        token: a repeat changes nothing)."""
        for gate, slot in taken:
            def run(gate: Gate = gate, slot: int = slot) -> None:
                self.db.execute_sql(self._undo, (gate.scope, slot, holder, token))
            recovering(self.dialect, self.db, run, run)
