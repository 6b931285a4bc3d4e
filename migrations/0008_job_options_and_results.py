"""Options stored with each job, and kept results (issue 24).

Two nullable columns on ``caravel_jobs`` and one on ``caravel_outbox``; no row is
rewritten and no index changes:

- ``job_options`` (VARCHAR(255), both tables): what a job's type or its Dispatch set
  beyond ``max_attempts`` (retry delay, its cap, the timeout, keep_result), as a short
  canonical JSON object (caravel_lite.job_options). NULL, as on every row written
  before this script, means the worker's ``QueueOptions`` apply: what such jobs did
  before.
- ``result`` (``caravel_jobs`` only; TEXT, MEDIUMTEXT on MariaDB/MySQL, which holds
  the 1 MiB upper bound of ``QueueOptions.max_result_bytes``): a completed job's kept
  return value, NULL otherwise. It lives in the job's row, so pruning a job removes its
  result with it.

Where the dialect's change signal is "notify" (PostgreSQL), a trigger announces a job
that finishes (completed or dead-lettered) on the channel ``caravel_jobs_finished``,
payload its id, for ``queue.wait`` to wake on; only rows that store options
(``job_options IS NOT NULL``: results kept, a timeout, a backoff of their own), so the
completions of every other job send nothing (the WHEN clause is all they cost).

Rolling upgrade: the code before this script writes and reads rows without naming
either column, so it keeps working against the new schema (its jobs get NULL: queue
options, no result). ``ALTER TABLE ... ADD COLUMN`` of a nullable column without a
default is a change of the table's definition only on all three databases (SQLite
appends to the schema text; PostgreSQL 11+ and MariaDB 10.3+ add it instantly).
"""
from caravel_lite.dialect import dialect_of

# Frozen as of this revision.
JOBS = "caravel_jobs"
OUTBOX = "caravel_outbox"
OPTIONS = "job_options VARCHAR(255) NULL"
FINISHED_CHANNEL = "caravel_jobs_finished"
FUNCTION = "caravel_jobs_notify_finished"
ON_FINISH = "caravel_jobs_notify_finish"


def up(migrator, db):
    payload_type = dialect_of(db).payload_type
    db.execute_sql(f"ALTER TABLE {JOBS} ADD COLUMN {OPTIONS}")
    db.execute_sql(f"ALTER TABLE {JOBS} ADD COLUMN result {payload_type} NULL")
    db.execute_sql(f"ALTER TABLE {OUTBOX} ADD COLUMN {OPTIONS}")
    if dialect_of(db).change_signal == "notify":
        db.execute_sql(f"""
            CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                PERFORM pg_notify('{FINISHED_CHANNEL}', NEW.id);
                RETURN NULL;
            END
            $$""")
        db.execute_sql(
            f"CREATE TRIGGER {ON_FINISH} AFTER UPDATE OF state ON {JOBS} FOR EACH ROW "
            f"WHEN (NEW.job_options IS NOT NULL AND OLD.state <> NEW.state "
            f"AND NEW.state IN ('completed', 'dead_letter')) EXECUTE FUNCTION {FUNCTION}()")


def down(migrator, db):
    if dialect_of(db).change_signal == "notify":
        db.execute_sql(f"DROP TRIGGER IF EXISTS {ON_FINISH} ON {JOBS}")
        db.execute_sql(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
    # Kept results and per-job options are lost: the jobs run with the queue's options.
    db.execute_sql(f"ALTER TABLE {OUTBOX} DROP COLUMN job_options")
    db.execute_sql(f"ALTER TABLE {JOBS} DROP COLUMN result")
    db.execute_sql(f"ALTER TABLE {JOBS} DROP COLUMN job_options")
