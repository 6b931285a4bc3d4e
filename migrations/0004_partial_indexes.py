"""Partial indexes on the jobs table, and one insert notification per statement.

Every committed write touches each B-tree the row belongs to (on SQLite in WAL mode,
one more page written per index per commit). Three indexes of 0001 only ever serve
queries about a few of the rows, so where the dialect has partial indexes (SQLite,
PostgreSQL) they are rebuilt to hold only those rows:

- ``caravel_jobs_dedup_key``: UNIQUE (dedup_key) WHERE dedup_key IS NOT NULL. Most
  jobs have no idempotency key; they no longer write an entry. Uniqueness is the same
  (NULLs never collided), and ``dedup_key = ?`` / ``IN (...)`` imply the predicate,
  so the lookups still use it.
- ``caravel_jobs_queue_state_lease_expires_at``: (queue, lease_expires_at) WHERE
  state = 'leased'. Only the sweep of expired leases (``queue = ? AND state = 'leased'
  AND lease_expires_at <= ?``) and the waiter's next-expiry probe read it. A job
  has an entry only while leased: enqueue writes none, a claim adds it, a completion
  removes it (before, every state change rewrote the row's entry).
- ``caravel_jobs_state_finished_at``: (state, finished_at) WHERE finished_at IS NOT
  NULL. Only pruning (``state IN (...) AND finished_at < ?``) reads it and only
  finished (completed, dead-lettered) rows have a finished_at.

The claim index (queue, state, priority, available_at, enqueued_at, id) is unchanged:
it serves the claim and the counts by state. Each index keeps its name (the lease
index's still names state, now fixed by its predicate), so that code, documentation
and tests name one index per purpose on every database: it is dropped
and created again in this script's transaction, which on a large table holds the jobs
table's lock while the three indexes are built (on PostgreSQL DROP INDEX takes an
ACCESS EXCLUSIVE lock: readers wait too; on SQLite other writers wait).

Where the change signal is "notify" (PostgreSQL), 0003's row-level insert trigger,
one pg_notify per inserted row, is replaced by a statement-level trigger over the
statement's transition table: one pg_notify per distinct queue among the inserted
pending rows, with their earliest available_at. Channel and payload ("<queue>
<available_at ms>") are those of 0003, so listeners (caravel_lite.wakeup) are
unchanged; a multi-row INSERT (or a COPY) now announces each queue once. The UPDATE trigger of 0003
stays as it was (a transition table is not allowed on a trigger with a column list).

On MariaDB/MySQL (no partial indexes, no NOTIFY) this script changes nothing; it is
still recorded as applied, so every database has the same migration history.
"""
from caravel_lite.dialect import dialect_of

# Frozen as of this revision.
TABLE = "caravel_jobs"
CHANNEL = "caravel_jobs"
PENDING = "pending"
LEASED = "leased"

DEDUP = "caravel_jobs_dedup_key"
LEASE = "caravel_jobs_queue_state_lease_expires_at"
PRUNE = "caravel_jobs_state_finished_at"

# (name, unique, columns, predicate): what this script creates ...
PARTIAL = (
    (DEDUP, True, "dedup_key", "dedup_key IS NOT NULL"),
    (LEASE, False, "queue, lease_expires_at", f"state = '{LEASED}'"),
    (PRUNE, False, "state, finished_at", "finished_at IS NOT NULL"),
)
# ... and what 0001 had created under the same names (restored by down).
FULL = (
    (DEDUP, True, "dedup_key", None),
    (LEASE, False, "queue, state, lease_expires_at", None),
    (PRUNE, False, "state, finished_at", None),
)

# The row-level function of 0003, still used by its UPDATE trigger.
ROW_FUNCTION = "caravel_jobs_notify_pending"
STATEMENT_FUNCTION = "caravel_jobs_notify_inserted"
ON_INSERT = "caravel_jobs_notify_insert"


def _rebuild(db, indexes):
    for name, unique, columns, predicate in indexes:
        db.execute_sql(f"DROP INDEX {name}")
        where = f" WHERE {predicate}" if predicate else ""
        db.execute_sql(f"CREATE {'UNIQUE ' if unique else ''}INDEX {name} "
                       f"ON {TABLE} ({columns}){where}")


def up(migrator, db):
    dialect = dialect_of(db)
    if dialect.partial_indexes:
        _rebuild(db, PARTIAL)
    if dialect.change_signal == "notify":
        db.execute_sql(f"""
            CREATE FUNCTION {STATEMENT_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('{CHANNEL}', queue || ' ' || min(available_at))
                FROM inserted WHERE state = '{PENDING}' GROUP BY queue;
                RETURN NULL;
            END
            $$""")
        db.execute_sql(f"DROP TRIGGER {ON_INSERT} ON {TABLE}")
        db.execute_sql(
            f"CREATE TRIGGER {ON_INSERT} AFTER INSERT ON {TABLE} "
            f"REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT "
            f"EXECUTE FUNCTION {STATEMENT_FUNCTION}()")


def down(migrator, db):
    dialect = dialect_of(db)
    if dialect.change_signal == "notify":
        db.execute_sql(f"DROP TRIGGER {ON_INSERT} ON {TABLE}")
        db.execute_sql(f"DROP FUNCTION {STATEMENT_FUNCTION}()")
        # 0003's trigger, as 0003 wrote it.
        db.execute_sql(
            f"CREATE TRIGGER {ON_INSERT} AFTER INSERT ON {TABLE} FOR EACH ROW "
            f"WHEN (NEW.state = '{PENDING}') EXECUTE FUNCTION {ROW_FUNCTION}()")
    if dialect.partial_indexes:
        _rebuild(db, FULL)
