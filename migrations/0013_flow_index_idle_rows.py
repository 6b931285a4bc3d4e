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

A virtual column is computed, never stored: adding it rewrites no row. The index is
then replaced by one ALTER TABLE that drops and adds it together (online, LOCK=NONE), so
there is no moment without an index of that name: code from before this script forces
it by name in its gated claims, and would fail ("key doesn't exist") in a gap between
two statements. Each step checks what is already there first, so a run cut short (DDL
is not transactional on MariaDB) is finished by running the migrations again.

Code from before this script still runs against the new schema (inserts name their
columns, the server computes ``flow_state``), but its gated claims filter ``state``
through the new index, so they read every entry of the queue's grouped jobs, history
included: upgrade the workers of fair or limited queues right after migrating
(docs/reference/schema.md).
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
    if COLUMN not in {c.name for c in db.get_columns(JOBS)}:
        db.execute_sql(f"ALTER TABLE {JOBS} ADD COLUMN {COLUMN} VARCHAR(16) GENERATED ALWAYS "
                       f"AS (CASE WHEN flow_group IS NULL THEN NULL ELSE state END) VIRTUAL")
    _rebuild(db, NEW_COLUMNS)


def down(migrator, db):
    dialect = dialect_of(db)
    if dialect.partial_indexes:
        return
    _rebuild(db, OLD_COLUMNS)
    if COLUMN in {c.name for c in db.get_columns(JOBS)}:
        db.execute_sql(f"ALTER TABLE {JOBS} DROP COLUMN {COLUMN}")


def _rebuild(db, columns):
    """The flow index on ``columns``, replaced in one statement (or created, after a run
    cut short between 0010's index's removal and this one's creation)."""
    present = {ix.name: list(ix.columns) for ix in db.get_indexes(JOBS)}
    wanted = [c.strip() for c in columns.split(",")]
    if present.get(INDEX) == wanted:
        return
    drop = f"DROP INDEX {INDEX}, " if INDEX in present else ""
    db.execute_sql(f"ALTER TABLE {JOBS} {drop}ADD INDEX {INDEX} ({columns}), LOCK=NONE")
