"""The SQL of the hot paths (enqueue, claim, renew, complete, fail), built once per queue.

Peewee's query builder costs a few hundred microseconds of CPU per statement; these
run as plain parameterised text through ``execute_sql``. Every state change repeats its
own predicate (a fenced, conditional UPDATE), so a stale actor changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import peewee

from caravel_lite.schema import JOBS_TABLE
from caravel_lite.values import JobState

PENDING = JobState.PENDING.value
LEASED = JobState.LEASED.value
COMPLETED = JobState.COMPLETED.value
DEAD = JobState.DEAD_LETTER.value

INSERT_COLUMNS = ("id", "queue", "tenant_id", "idempotency_key", "dedup_key", "wire_name",
                  "payload", "priority", "available_at", "max_attempts", "state",
                  "enqueued_at", "attempts", "renewals", "replay_count", "updated_at")
# What enqueue writes: those, then the options stored with the job (migration 0008;
# NULL for most jobs, as for rows written with INSERT_COLUMNS alone).
JOB_COLUMNS = INSERT_COLUMNS + ("job_options",)
# The same, with the enqueuing span's trace context, for a job enqueued while a span
# was active (caravel_lite.tracing): the statement without it stays as it was.
TRACED_COLUMNS = JOB_COLUMNS + ("trace_context",)

# What a claim reads of a candidate: all of it immutable after insert, except attempts,
# which the claiming UPDATE re-checks.
CANDIDATE_COLUMNS = "id, attempts, tenant_id, wire_name, payload, max_attempts"

# What a claim needs of each row it leases, plus the claim order (priority, due time,
# enqueue time, id) so that leases come back best first whatever order the database
# returned them in.
LEASE_COLUMNS = ("id, attempts, tenant_id, wire_name, payload, max_attempts, "
                 "priority, available_at, enqueued_at, job_options")

# A lease is owned while its row is LEASED with the same token and an expiry strictly
# after now. Parameters: id, token, now_ms.
_OWNED = f"id = {{p}} AND state = '{LEASED}' AND lease_token = {{p}} AND lease_expires_at > {{p}}"


@dataclass(frozen=True)
class Statements:
    insert: str
    insert_traced: str
    existing_by_dedup: str
    existing_by_id: str
    expired_exists: str
    sweep_exhausted: str
    sweep_reclaimable: str
    sweep_cancelled: str
    candidates: str
    take: str
    renew: str
    complete: str
    retry: str
    dead_letter: str
    release: str
    snooze: str
    leased_by_token: str
    settled: str

    @classmethod
    def build(cls, db: peewee.Database, candidate_limit: int) -> "Statements":
        p = db.param
        t = JOBS_TABLE
        owned = _OWNED.format(p=p)
        values = ", ".join([p] * len(JOB_COLUMNS))
        expired = f"queue = {p} AND state = '{LEASED}' AND lease_expires_at <= {p}"
        cleared = "lease_token = NULL, lease_expires_at = NULL"
        # A job with a cancel request (caravel_lite.cancel) is never made runnable
        # again, nor dead-lettered (a replay of the dead letters would run it again):
        # these statements skip it, and it ends CANCELLED instead.
        unrequested = "AND cancel_requested_at IS NULL"
        return cls(
            insert=f"INSERT INTO {t} ({', '.join(JOB_COLUMNS)}) VALUES ({values})",
            insert_traced=(f"INSERT INTO {t} ({', '.join(TRACED_COLUMNS)}) "
                           f"VALUES ({values}, {p})"),
            existing_by_dedup=f"SELECT id, wire_name, payload FROM {t} WHERE dedup_key = {p}",
            existing_by_id=f"SELECT id, wire_name, payload FROM {t} WHERE id = {p}",
            expired_exists=f"SELECT 1 FROM {t} WHERE {expired} LIMIT 1",
            # params: now_ms (finished), now_ms (updated), queue, now_ms
            sweep_exhausted=(
                f"UPDATE {t} SET state = '{DEAD}', last_failure = 'attempts_exhausted', "
                f"{cleared}, finished_at = {p}, updated_at = {p} "
                f"WHERE {expired} AND attempts >= max_attempts {unrequested}"),
            # params: now_ms (updated), queue, now_ms
            sweep_reclaimable=(
                f"UPDATE {t} SET state = '{PENDING}', last_failure = 'lease_expired', "
                f"{cleared}, updated_at = {p} "
                f"WHERE {expired} AND attempts < max_attempts {unrequested}"),
            # params: now_ms (finished), now_ms (updated), queue, now_ms
            sweep_cancelled=(
                f"UPDATE {t} SET state = '{JobState.CANCELLED.value}', {cleared}, "
                f"finished_at = {p}, updated_at = {p} "
                f"WHERE {expired} AND cancel_requested_at IS NOT NULL"),
            # params: queue, now_ms
            candidates=(
                f"SELECT {CANDIDATE_COLUMNS} FROM {t} "
                f"WHERE queue = {p} AND state = '{PENDING}' AND available_at <= {p} "
                f"ORDER BY priority, available_at, enqueued_at, id LIMIT {int(candidate_limit)}"),
            # params: token, expires_ms, now_ms (claimed), now_ms (updated), id, attempts, now_ms
            take=(
                f"UPDATE {t} SET state = '{LEASED}', attempts = attempts + 1, "
                f"lease_token = {p}, lease_expires_at = {p}, claimed_at = {p}, updated_at = {p} "
                f"WHERE id = {p} AND state = '{PENDING}' AND attempts = {p} "
                f"AND attempts < max_attempts AND available_at <= {p}"),
            # params: new_expiry, now_ms, id, token, now_ms, new_expiry
            # renewals always changes, so the row counts as changed even when the expiry
            # is equal (MariaDB reports changed rows unless FOUND_ROWS is set).
            renew=(
                f"UPDATE {t} SET lease_expires_at = {p}, renewals = renewals + 1, "
                f"updated_at = {p} WHERE {owned} AND lease_expires_at <= {p}"),
            # params: now_ms (finished), now_ms (updated), id, token, now_ms
            complete=(
                f"UPDATE {t} SET state = '{COMPLETED}', {cleared}, last_failure = NULL, "
                f"finished_at = {p}, updated_at = {p} WHERE {owned}"),
            # params: due_ms, failure, now_ms (updated), id, token, now_ms
            retry=(
                f"UPDATE {t} SET state = '{PENDING}', available_at = {p}, last_failure = {p}, "
                f"{cleared}, updated_at = {p} WHERE {owned} {unrequested}"),
            # params: failure, now_ms (finished), now_ms (updated), id, token, now_ms
            dead_letter=(
                f"UPDATE {t} SET state = '{DEAD}', last_failure = {p}, {cleared}, "
                f"finished_at = {p}, updated_at = {p} WHERE {owned} {unrequested}"),
            # Hand an owned job back: PENDING, the claim's attempt given back, due time
            # and last failure as they were. params: now_ms (updated), id, token, now_ms
            release=(
                f"UPDATE {t} SET state = '{PENDING}', attempts = attempts - 1, {cleared}, "
                f"updated_at = {p} WHERE {owned} {unrequested}"),
            # The same with a new due time. params: due_ms, now_ms (updated), id, token, now_ms
            snooze=(
                f"UPDATE {t} SET state = '{PENDING}', attempts = attempts - 1, "
                f"available_at = {p}, {cleared}, updated_at = {p} WHERE {owned} {unrequested}"),
            # What a claim whose reply was lost took: the rows holding its token, in
            # the shape UPDATE ... RETURNING gives. params: queue, token
            leased_by_token=(
                f"SELECT {LEASE_COLUMNS} FROM {t} WHERE queue = {p} "
                f"AND state = '{LEASED}' AND lease_token = {p}"),
            # What a lease operation whose reply was lost left: the row's state, token,
            # expiry and last write, and the claim it was last leased by (its time and
            # attempt count; the token is cleared by the operations that end a lease).
            # params: id
            settled=(f"SELECT state, lease_token, lease_expires_at, updated_at, claimed_at, "
                     f"attempts, last_failure FROM {t} WHERE id = {p}"),
        )



class BatchStatements:
    """Statements whose text depends on a row count (id lists, LIMIT), built on first
    use per count and kept, so each distinct size is formatted once per queue."""

    def __init__(self, db: peewee.Database, claim_lock: Optional[str],
                 picked_ids: str = "id IN (SELECT id FROM picked)",
                 listed: str = "{column} IN ({marks})") -> None:
        self._p = db.param
        self._lock = claim_lock
        self._picked_ids = picked_ids  # Dialect.picked_ids
        self._listed = listed  # Dialect.listed
        self._cache: Dict[Tuple[str, int], str] = {}

    def _get(self, kind: str, n: int) -> str:
        key = (kind, n)
        sql = self._cache.get(key)
        if sql is None:
            sql = self._cache[key] = getattr(self, "_" + kind)(n)
        return sql

    def claim_read(self, n: int) -> str:
        return self._get("claim_read", n)

    def claim_returning(self, n: int) -> str:
        return self._get("claim_returning", n)

    def claim_locked(self, n: int) -> str:
        return self._get("claim_locked", n)

    def take_many(self, n: int) -> str:
        return self._get("take_many", n)

    def taken_ids(self, n: int) -> str:
        return self._get("taken_ids", n)

    def complete_many(self, n: int) -> str:
        return self._get("complete_many", n)

    def complete_many_returning(self, n: int) -> str:
        return self._get("complete_many_returning", n)

    def insert_many(self, n: int) -> str:
        return self._get("insert_many", n)

    def insert_many_traced(self, n: int) -> str:
        return self._get("insert_many_traced", n)

    def existing_by_dedup(self, n: int) -> str:
        return self._get("existing_by_dedup", n)

    def existing_ids(self, n: int) -> str:
        return self._get("existing_ids", n)

    def completed_at(self, n: int) -> str:
        return self._get("completed_at", n)

    # -- builders --------------------------------------------------------------------

    def _ids(self, n: int) -> str:
        return ", ".join([self._p] * n)

    def _in(self, n: int, column: str = "id") -> str:
        """``column`` among n listed values (params: the n values), as the dialect
        keeps it on its index (:attr:`Dialect.listed`)."""
        return self._listed.format(column=column, marks=self._ids(n))

    def _case(self, n: int) -> str:
        # A per-row value: CASE id WHEN <id> THEN <value> ... END (params: id, value pairs).
        whens = " ".join(f"WHEN {self._p} THEN {self._p}" for _ in range(n))
        return f"CASE id {whens} END"

    def _claim_read(self, n: int) -> str:
        """The n best due pending candidates plus at most one expired lease (marker 1),
        in one round trip: two index-range reads joined by UNION ALL. The sweep runs
        only when that second read finds something. Params: queue, now_ms, queue,
        now_ms."""
        p, t = self._p, JOBS_TABLE
        return (
            f"SELECT * FROM (SELECT 0 AS expired, {LEASE_COLUMNS} FROM {t} "
            f"WHERE queue = {p} AND state = '{PENDING}' AND available_at <= {p} "
            f"ORDER BY priority, available_at, enqueued_at, id LIMIT {int(n)}) candidates "
            f"UNION ALL "
            f"SELECT * FROM (SELECT 1 AS expired, {LEASE_COLUMNS} FROM {t} "
            f"WHERE queue = {p} AND state = '{LEASED}' AND lease_expires_at <= {p} "
            f"LIMIT 1) expired_lease")

    def _claim_returning(self, n: int) -> str:
        """Lease up to n due jobs in one statement, unless the queue has an expired
        lease (which must be swept first: then nothing is claimed and the caller
        sweeps and repeats). The candidates are a MATERIALIZED CTE: as a plain
        ``IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` PostgreSQL may re-run the
        subquery per row (a semi-join) and take more than n. The picked rows are still
        as the CTE saw them when the UPDATE writes them (PostgreSQL: it locked them and
        re-checked its predicate on the newest version; SQLite: the statement runs
        alone under the write lock), so the predicate is not repeated outside it: on
        SQLite that would steer the UPDATE to the state index and a scan of every
        pending row instead of primary-key lookups. The picked ids are named as the
        dialect finds them by primary key (:attr:`Dialect.picked_ids`). Params: queue,
        now_ms, token, expires_ms, now_ms, now_ms, queue, now_ms."""
        p, t = self._p, JOBS_TABLE
        lock = f" {self._lock}" if self._lock else ""
        # One job (run_once, claim): the picked id as a scalar, an equality on the
        # primary key in every table state. PostgreSQL read a small table without
        # statistics (2,000 rows) whole to match one id against the array form.
        picked = "id = (SELECT id FROM picked)" if n == 1 else self._picked_ids
        return (
            f"WITH picked AS MATERIALIZED (SELECT id FROM {t} WHERE queue = {p} "
            f"AND state = '{PENDING}' AND available_at <= {p} AND attempts < max_attempts "
            f"ORDER BY priority, available_at, enqueued_at, id LIMIT {int(n)}{lock}) "
            f"UPDATE {t} SET state = '{LEASED}', attempts = attempts + 1, "
            f"lease_token = {p}, lease_expires_at = {p}, claimed_at = {p}, updated_at = {p} "
            f"WHERE {picked} "
            f"AND NOT EXISTS (SELECT 1 FROM {t} WHERE queue = {p} AND state = '{LEASED}' "
            f"AND lease_expires_at <= {p}) "
            f"RETURNING {LEASE_COLUMNS}")

    def _claim_locked(self, n: int) -> str:
        """The n best due candidates, locked for the claiming transaction; rows another
        claim holds are skipped, not waited for (where UPDATE ... RETURNING is missing:
        MariaDB 10.6+, MySQL 8.0.1+). Params: queue, now_ms."""
        p, t = self._p, JOBS_TABLE
        return (
            f"SELECT {LEASE_COLUMNS} FROM {t} WHERE queue = {p} AND state = '{PENDING}' "
            f"AND available_at <= {p} AND attempts < max_attempts "
            f"ORDER BY priority, available_at, enqueued_at, id LIMIT {int(n)} {self._lock}")

    def _take_many(self, n: int) -> str:
        """The portable claim of n observed candidates: each row only if it is still
        pending, due and at the attempt count observed. Params: token, expires_ms,
        now_ms, now_ms, *ids, now_ms, *(id, attempts)."""
        p, t = self._p, JOBS_TABLE
        return (
            f"UPDATE {t} SET state = '{LEASED}', attempts = attempts + 1, "
            f"lease_token = {p}, lease_expires_at = {p}, claimed_at = {p}, updated_at = {p} "
            f"WHERE {self._in(n)} AND state = '{PENDING}' "
            f"AND attempts < max_attempts AND available_at <= {p} "
            f"AND attempts = {self._case(n)}")

    def _taken_ids(self, n: int) -> str:
        # Params: *ids, token.
        return (f"SELECT id FROM {JOBS_TABLE} WHERE {self._in(n)} "
                f"AND lease_token = {self._p}")

    def _complete_many(self, n: int) -> str:
        """Complete every owned lease of a batch; each row fenced by its own token and
        an unexpired lease. Params: now_ms, now_ms, *ids, now_ms, *(id, token)."""
        p, t = self._p, JOBS_TABLE
        # The state test is wrapped in CASE so that no planner can use it as an index
        # condition: SQLite without statistics preferred walking every leased row of
        # the state index to looking up the listed ids by primary key.
        return (
            f"UPDATE {t} SET state = '{COMPLETED}', lease_token = NULL, "
            f"lease_expires_at = NULL, last_failure = NULL, finished_at = {p}, "
            f"updated_at = {p} WHERE {self._in(n)} "
            f"AND CASE WHEN state = '{LEASED}' THEN 1 ELSE 0 END = 1 "
            f"AND lease_expires_at > {p} AND lease_token = {self._case(n)}")

    def _complete_many_returning(self, n: int) -> str:
        return self._complete_many(n) + " RETURNING id"

    def _insert_many(self, n: int, columns: Optional[Tuple[str, ...]] = None) -> str:
        # JOB_COLUMNS read at the call (not bound as a default): a test of an older
        # release's statements replaces it.
        columns = JOB_COLUMNS if columns is None else columns
        row = "(" + ", ".join([self._p] * len(columns)) + ")"
        return (f"INSERT INTO {JOBS_TABLE} ({', '.join(columns)}) VALUES "
                + ", ".join([row] * n))

    def _insert_many_traced(self, n: int) -> str:
        return self._insert_many(n, TRACED_COLUMNS)

    def _existing_by_dedup(self, n: int) -> str:
        return (f"SELECT id, dedup_key, wire_name, payload FROM {JOBS_TABLE} "
                f"WHERE {self._in(n, 'dedup_key')}")

    def _existing_ids(self, n: int) -> str:
        return f"SELECT id FROM {JOBS_TABLE} WHERE {self._in(n)}"

    def _completed_at(self, n: int) -> str:
        # Which of n jobs a completion written at now_ms left COMPLETED, with the claim
        # each was last leased by (a lost reply's read-back). Params: *ids, now_ms.
        return (f"SELECT id, claimed_at, attempts FROM {JOBS_TABLE} WHERE {self._in(n)} "
                f"AND state = '{COMPLETED}' AND lease_token IS NULL AND updated_at = {self._p}")
