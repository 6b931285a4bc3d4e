"""Where indexes cannot be partial (MariaDB, MySQL), the flow index stops moving for
jobs outside gated queues.

0010's ``caravel_jobs_flow_group`` holds every row there, keyed by (queue, state,
...): every claim and every completion of any job moved its entry, one more index
write per transition for a queue that uses no flow control (measured on MariaDB: a
default worker's drain of 5,000 jobs ran at about 0.83x of the round's starting commit
with that index, 0.95x without it). This script adds ``flow_state``, a virtual generated
column equal to ``state`` for a job with a group and NULL for one without, and keys
the index on it instead of ``state``: an ungrouped job's entry is written once, at
enqueue, and never changes after. The gated claim (caravel_lite.fairness) reads
``flow_state`` where ``Dialect.flow_state`` says so.

SQLite and PostgreSQL are left as they are: their index is partial (``WHERE
flow_group IS NOT NULL``), so ungrouped jobs have no entry in it at all.

A virtual column is computed, never stored: adding it rewrites no row; rebuilding the
index reads the table once. Code from before this script still runs against the new
schema (inserts name their columns, the server computes ``flow_state``); its gated
claims filter ``state`` through the new index, correct but reading every entry of the
queue, until every worker runs this revision.
"""
from caravel_lite.dialect import dialect_of

# Frozen as of this revision.
JOBS = "caravel_jobs"
INDEX = "caravel_jobs_flow_group"
COLUMN = "flow_state"
OLD_COLUMNS = "queue, state, flow_group, priority, available_at, enqueued_at, id"
NEW_COLUMNS = "queue, flow_state, flow_group, priority, available_at, enqueued_at, id"


def up(migrator, db):
    dialect = dialect_of(db)
    if dialect.partial_indexes:
        return
    db.execute_sql(f"ALTER TABLE {JOBS} ADD COLUMN {COLUMN} VARCHAR(16) GENERATED ALWAYS AS "
                   f"(CASE WHEN flow_group IS NULL THEN NULL ELSE state END) VIRTUAL")
    db.execute_sql(dialect.drop_index(INDEX, JOBS))
    db.execute_sql(f"CREATE INDEX {INDEX} ON {JOBS} ({NEW_COLUMNS})")


def down(migrator, db):
    dialect = dialect_of(db)
    if dialect.partial_indexes:
        return
    db.execute_sql(dialect.drop_index(INDEX, JOBS))
    db.execute_sql(f"ALTER TABLE {JOBS} DROP COLUMN {COLUMN}")
    db.execute_sql(f"CREATE INDEX {INDEX} ON {JOBS} ({OLD_COLUMNS})")
