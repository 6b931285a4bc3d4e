"""The claim of a gated queue (:mod:`caravel_lite.limits`): group by group, in rotation,
each job through its limits' slots (:mod:`caravel_lite.slots`).

A gated queue's jobs carry a group: the tenant in a fair queue; else the concurrency
key, or a rate-limited type's name, or the shared empty group. A claim visits the groups that have pending jobs in
the order of their names, starting after the group the previous claim of this queue
object served and wrapping around: so with tenant A holding 100,000 ready jobs and
tenant B one, B's job is the next but one claimed. In each group it takes the best
due job (priority, due time, enqueue time, id: priorities order a tenant's own jobs,
never one tenant's job ahead of another tenant's turn), once that job has a slot of
each of its limits; a group whose best job is over a limit gives its turn to its next
job, if any, and the waiting jobs of a key start in their claim order as its slots
free; a queue out of starts (its rate limit) ends the claim.

Cost, bounded whatever the number of groups: each group visited is two index seeks
(``caravel_jobs_flow_group``: the next group name, the group's best due job), and a
claim of n jobs visits at most n + :data:`EXTRA_VISITS` groups, so groups holding
only delayed or over-limit jobs cost a claim a few seeks, and are skipped by the
rotation. The rotation's position is kept by each queue object (each worker process
rotates on its own, so each gives every group its turn).

Jobs of a gated queue that were written without a group (before migration 0010, or by
a process whose options declare no flow control) are read in the ordinary claim order
on every :data:`UNGROUPED_EVERY`-th claim and whenever the groups gave nothing, four
at a time in the ordinary order, grouped jobs skipped: four or more grouped jobs held
back by a limit ahead of them hold them until those start (the README's known limits).
"""
from __future__ import annotations

import itertools
import secrets
import threading
import uuid
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import peewee

from caravel_lite.claim import Claimer
from caravel_lite.limits import FlowPolicy
from caravel_lite.schema import FLOW_INDEX, JOBS_TABLE
from caravel_lite.slots import Slots, Taken
from caravel_lite.statements import LEASE_COLUMNS, PENDING
from caravel_lite.values import ClaimBatch, QueueLease

EXTRA_VISITS = 8
UNGROUPED_EVERY = 8
UNGROUPED_READ = 4
# How many of a head row's values are LEASE_COLUMNS; the one after them is the job's
# key (head) or group (ungrouped).
LEASE_WIDTH = len(LEASE_COLUMNS.split(","))
# A job chosen by a claim (its row: LEASE_COLUMNS and its key) and the slots taken for it.
Chosen = Tuple[Sequence[Any], List[Taken]]


class GroupClaimer:
    """Claims the jobs of gated queues for one :class:`DatabaseQueue`."""

    def __init__(self, db: peewee.Database, claimer: Claimer, policy: FlowPolicy) -> None:
        self.db = db
        self.claimer = claimer
        self.policy = policy
        self.slots = Slots(db, claimer.dialect)
        self._cursor: Dict[str, str] = {}
        self._held: Dict[str, bool] = {}  # a claim of the queue met a job over a limit
        self._lock = threading.Lock()
        self._claims = itertools.count()
        p = db.param
        t = claimer.dialect.table_via(JOBS_TABLE, FLOW_INDEX.name)
        state = claimer.dialect.flow_state  # the flow index's state column
        groups = (f"SELECT flow_group FROM {t} WHERE queue = {p} AND {state} = '{PENDING}' "
                  f"AND flow_group IS NOT NULL")
        # params: queue (, after)
        self.first_group = f"{groups} ORDER BY flow_group LIMIT 1"
        self.next_group = f"{groups} AND flow_group > {p} ORDER BY flow_group LIMIT 1"
        # params: queue, group, now_ms, how many
        self.head = (f"SELECT {LEASE_COLUMNS}, concurrency_key, updated_at FROM {t} "
                     f"WHERE queue = {p} "
                     f"AND {state} = '{PENDING}' AND flow_group = {p} AND available_at <= {p} "
                     f"AND attempts < max_attempts "
                     f"ORDER BY priority, available_at, enqueued_at, id LIMIT {p}")
        # params: queue, now_ms (the ordinary claim order, through the claim index)
        self.ungrouped = (
            f"SELECT {LEASE_COLUMNS}, flow_group, updated_at FROM {JOBS_TABLE} "
            f"WHERE queue = {p} "
            f"AND state = '{PENDING}' AND available_at <= {p} AND attempts < max_attempts "
            f"ORDER BY priority, available_at, enqueued_at, id LIMIT {UNGROUPED_READ}")

    def _one(self, sql: str, params: Sequence[Any]) -> Optional[Sequence[Any]]:
        row: Optional[Sequence[Any]] = self.db.execute_sql(sql, params).fetchone()
        return row

    def claim(self, queue_name: str, limit: int, now_us: int, now_ms: int,
              expires_ms: int, token: Optional[str] = None) -> ClaimBatch:
        """Up to ``limit`` leases (fewer when the groups' best jobs are over their
        limits), under ``token``; expired leases of the queue are swept first. The jobs
        chosen are leased together by one UPDATE fenced on each row's observed state,
        as the portable claim's; a slot taken for a job lost to another claimer is
        handed back; ``contended`` when every chosen job was lost that way. A lost
        reply is recovered by each step as the ordinary claim's:
        the slot's holder and token, the rows holding the lease token, are read back."""
        token = token or secrets.token_hex(16)
        self.claimer.sweep(queue_name, now_ms)
        chosen: List[Chosen] = []
        with self._lock:
            cursor = self._cursor.get(queue_name)
        stopped = False
        wrapped = False  # passed the last group and began again from the first
        took = False  # chose a job since then
        visits: Dict[str, int] = {}  # group -> visits in this claim
        seen: Set[str] = set()  # the jobs this claim looked at
        while len(chosen) < limit and sum(visits.values()) < limit + EXTRA_VISITS \
                and not stopped:
            row = (self._one(self.next_group, (queue_name, cursor)) if cursor is not None
                   else self._one(self.first_group, (queue_name,)))
            if row is None:
                if cursor is None or (wrapped and not took):
                    break  # no group, or a whole round that chose nothing
                cursor, wrapped, took = None, True, False
                continue
            cursor = row[0]
            # The k-th visit in one claim reads the group's k best due jobs and takes
            # the best one this claim has not looked at yet (each earlier visit looked
            # at one: chose it, or found it over a limit). By id, not by position: a
            # job may have moved ahead since (a retry fallen due, a job handed back).
            k = visits[cursor] = visits.get(cursor, 0) + 1
            heads = self.db.execute_sql(self.head, (queue_name, cursor, now_ms, k)).fetchall()
            head = next((row for row in heads if row[0] not in seen), None)
            if head is not None:
                seen.add(head[0])
                picked, stopped = self._gate(queue_name, head, token, now_ms, expires_ms)
                if picked is not None:
                    chosen.append(picked)
                    took = True
        with self._lock:
            if cursor is not None:
                self._cursor[queue_name] = cursor
        if not stopped and len(chosen) < limit and (
                not chosen or next(self._claims) % UNGROUPED_EVERY == 0):
            chosen += self._ungrouped(queue_name, limit - len(chosen), token, now_ms,
                                      expires_ms)
        leases = tuple(self._lease(queue_name, chosen, now_us, now_ms, expires_ms, token))
        # Chose jobs and lost every one to another claimer between the read and the
        # fenced UPDATE: due jobs may remain, so the caller may claim again at once.
        return ClaimBatch(leases, bool(chosen) and not leases,
                          self._held.pop(queue_name, False))

    def _ungrouped(self, queue_name: str, limit: int, token: str, now_ms: int,
                   expires_ms: int) -> List[Chosen]:
        rows = self.db.execute_sql(self.ungrouped, (queue_name, now_ms)).fetchall()
        chosen: List[Chosen] = []
        for row in rows:
            if row[LEASE_WIDTH] is not None or len(chosen) >= limit:
                continue  # a grouped job: the rotation's
            picked, stopped = self._gate(queue_name,
                                         (*row[:LEASE_WIDTH], None, row[LEASE_WIDTH + 1]),
                                         token, now_ms, expires_ms)
            if picked is not None:
                chosen.append(picked)
            if stopped:
                break
        return chosen

    def _gate(self, queue_name: str, row: Sequence[Any], token: str, now_ms: int,
              expires_ms: int) -> Tuple[Optional[Chosen], bool]:
        """The job of ``row`` with a slot of each of its limits taken for it, or None;
        and whether the queue itself is out of starts."""
        gates = self.policy.gates(queue_name, row[3], row[LEASE_WIDTH])
        if not gates:
            return (row, []), False
        # The claim will raise the job's attempt count by one (row[1]: as observed);
        # the row's last write as observed (the value after its key) dates the slot.
        taken, blocked = self.slots.take_all(gates, str(row[0]), token, int(row[1]) + 1,
                                             now_ms, expires_ms,
                                             int(row[LEASE_WIDTH + 1] or 0))
        if taken is None:
            with self._lock:
                self._held[queue_name] = True
            return None, blocked is not None and blocked.queue_wide
        return (row, taken), False

    def _lease(self, queue_name: str, chosen: List[Chosen], now_us: int, now_ms: int,
               expires_ms: int, token: str) -> List[QueueLease]:
        """Lease the chosen jobs with one fenced UPDATE; hand back the slots of those
        another claimer took first."""
        if not chosen:
            return []
        leases = self.claimer._take(queue_name, [row[:LEASE_WIDTH] for row, _ in chosen], now_us,
                                    now_ms, expires_ms, token)
        leased = {str(lease.job_id) for lease in leases}
        for row, taken in chosen:
            if taken and str(uuid.UUID(str(row[0]))) not in leased:
                self.slots.undo(taken, str(row[0]), token)
        return leases
