"""The SQL of the hot paths (enqueue, claim, renew, complete, fail), built once per queue.

Peewee's query builder costs a few hundred microseconds of CPU per statement; these
run as plain parameterised text through ``execute_sql``. Every state change repeats its
own predicate (a fenced, conditional UPDATE), so a stale actor changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

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

# What a claim reads of a candidate: all of it immutable after insert, except attempts,
# which the claiming UPDATE re-checks.
CANDIDATE_COLUMNS = "id, attempts, tenant_id, wire_name, payload, max_attempts"

# A lease is owned while its row is LEASED with the same token and an expiry strictly
# after now. Parameters: id, token, now_ms.
_OWNED = f"id = {{p}} AND state = '{LEASED}' AND lease_token = {{p}} AND lease_expires_at > {{p}}"


@dataclass(frozen=True)
class Statements:
    insert: str
    existing_by_dedup: str
    existing_by_id: str
    expired_exists: str
    sweep_exhausted: str
    sweep_reclaimable: str
    candidates: str
    take: str
    renew: str
    complete: str
    retry: str
    dead_letter: str

    @classmethod
    def build(cls, db: peewee.Database, candidate_limit: int) -> "Statements":
        p = db.param
        t = JOBS_TABLE
        owned = _OWNED.format(p=p)
        values = ", ".join([p] * len(INSERT_COLUMNS))
        expired = f"queue = {p} AND state = '{LEASED}' AND lease_expires_at <= {p}"
        cleared = "lease_token = NULL, lease_expires_at = NULL"
        return cls(
            insert=f"INSERT INTO {t} ({', '.join(INSERT_COLUMNS)}) VALUES ({values})",
            existing_by_dedup=f"SELECT id, wire_name, payload FROM {t} WHERE dedup_key = {p}",
            existing_by_id=f"SELECT id, wire_name, payload FROM {t} WHERE id = {p}",
            expired_exists=f"SELECT 1 FROM {t} WHERE {expired} LIMIT 1",
            # params: now_ms (finished), now_ms (updated), queue, now_ms
            sweep_exhausted=(
                f"UPDATE {t} SET state = '{DEAD}', last_failure = 'attempts_exhausted', "
                f"{cleared}, finished_at = {p}, updated_at = {p} "
                f"WHERE {expired} AND attempts >= max_attempts"),
            # params: now_ms (updated), queue, now_ms
            sweep_reclaimable=(
                f"UPDATE {t} SET state = '{PENDING}', last_failure = 'lease_expired', "
                f"{cleared}, updated_at = {p} "
                f"WHERE {expired} AND attempts < max_attempts"),
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
                f"{cleared}, updated_at = {p} WHERE {owned}"),
            # params: failure, now_ms (finished), now_ms (updated), id, token, now_ms
            dead_letter=(
                f"UPDATE {t} SET state = '{DEAD}', last_failure = {p}, {cleared}, "
                f"finished_at = {p}, updated_at = {p} WHERE {owned}"),
        )
