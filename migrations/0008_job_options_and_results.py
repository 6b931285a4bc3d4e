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


def up(migrator, db):
    payload_type = dialect_of(db).payload_type
    db.execute_sql(f"ALTER TABLE {JOBS} ADD COLUMN {OPTIONS}")
    db.execute_sql(f"ALTER TABLE {JOBS} ADD COLUMN result {payload_type} NULL")
    db.execute_sql(f"ALTER TABLE {OUTBOX} ADD COLUMN {OPTIONS}")


def down(migrator, db):
    # Kept results and per-job options are lost: the jobs run with the queue's options.
    db.execute_sql(f"ALTER TABLE {OUTBOX} DROP COLUMN job_options")
    db.execute_sql(f"ALTER TABLE {JOBS} DROP COLUMN result")
    db.execute_sql(f"ALTER TABLE {JOBS} DROP COLUMN job_options")
