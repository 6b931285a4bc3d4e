"""Operator control during an incident (issue 25): cancel requests, recorded errors,
progress, paused queues and worker heartbeats.

``caravel_jobs`` gains four nullable columns, so the previous release's statements
(which name their columns) keep working against it during a rolling deploy:

- ``cancel_requested_at``: an operator asked a leased job to stop; the worker running
  it cancels its handler and ends it CANCELLED, and a lease that expires with the
  request set ends CANCELLED too (never re-run);
- ``progress_done``, ``progress_total``, ``progress_at``: the last progress a handler
  reported (``ctx.progress``).

``caravel_failures`` gains ``message`` and ``trace``: the exception's message and a
short traceback (file, line and function per frame), written only when the
application opted in with ``QueueOptions(record_errors=True)``.

Two small tables are created: ``caravel_paused_queues`` (one row per paused queue)
and ``caravel_workers`` (one heartbeat row per running worker). No existing row is
rewritten and no index of the jobs table changes.
"""
from peewee import BigIntegerField, CharField, IntegerField, Model, TextField

from caravel_lite.dialect import dialect_of
from caravel_lite.schema import exact_text

# Frozen as of this revision.
JOBS = "caravel_jobs"
FAILURES = "caravel_failures"
PAUSED = "caravel_paused_queues"
WORKERS = "caravel_workers"
JOB_COLUMNS = ("cancel_requested_at", "progress_done", "progress_total", "progress_at")
FAILURE_COLUMNS = ("message", "trace")


def _tables(db):
    dialect = dialect_of(db)

    class PausedQueue(Model):
        queue = exact_text(dialect, 64, primary_key=True)
        paused_at = BigIntegerField()

        class Meta:
            database = db
            table_name = PAUSED
            legacy_table_names = False

    class WorkerBeat(Model):
        worker_id = CharField(max_length=16, primary_key=True)
        host = CharField(max_length=255)
        pid = IntegerField()
        queues = TextField()
        concurrency = IntegerField()
        version = CharField(max_length=32)
        started_at = BigIntegerField()
        last_seen_at = BigIntegerField()
        running = IntegerField()

        class Meta:
            database = db
            table_name = WORKERS
            legacy_table_names = False

    return [PausedQueue, WorkerBeat]


def up(migrator, db):
    for column in JOB_COLUMNS:
        db.execute_sql(f"ALTER TABLE {JOBS} ADD COLUMN {column} BIGINT NULL")
    for column in FAILURE_COLUMNS:
        db.execute_sql(f"ALTER TABLE {FAILURES} ADD COLUMN {column} TEXT NULL")
    db.create_tables(_tables(db), safe=False)


def down(migrator, db):
    for table in reversed(_tables(db)):
        db.execute_sql(f"DROP TABLE {table._meta.table_name}")
    for table, columns in ((FAILURES, FAILURE_COLUMNS), (JOBS, JOB_COLUMNS)):
        for column in columns:
            db.execute_sql(f"ALTER TABLE {table} DROP COLUMN {column}")
