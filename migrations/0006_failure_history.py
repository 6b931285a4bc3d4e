"""The failure history, and the jobs indexes behind the operator views (QueueAdmin).

``caravel_failures`` keeps, for each attempt that ended in ``fail()``, when it failed,
its attempt number (and the job's replay count then), the category, the exception's
qualified type name and the site it was raised at (``module:function:line``), and a
short text only when the application opted in with ``QueueOptions(describe_failure=)``.
Never an exception message or a payload. Its key (job_id, seq) keeps a job's failures
together, in order; ``failed_at`` is indexed for failures per minute.

Jobs written before this script have no history rows: their last category is still in
``caravel_jobs.last_failure``, and new failures are recorded from their next attempt.
The jobs table's rows are not rewritten; its indexes gain:

- ``caravel_jobs_queue_state_id`` and ``caravel_jobs_tenant_id_state_id``: jobs newest
  first (ids begin with their creation millisecond) by queue or tenant, one state at a
  time, read in index order however large the history is;
- ``caravel_jobs_state_finished_at`` (0004's prune index, same name, same predicate
  where indexes can be partial) gains ``queue``: jobs finished per minute and queue,
  and pruning one queue, are read from the index alone.

Building them reads the whole jobs table once, under its lock (writers wait).
"""
from peewee import BigIntegerField, CharField, CompositeKey, IntegerField, Model, TextField

from caravel_lite.dialect import dialect_of
from caravel_lite.schema import exact_text

FAILURES = "caravel_failures"
JOBS = "caravel_jobs"
PRUNE = "caravel_jobs_state_finished_at"
NEW_INDEXES = (("caravel_jobs_queue_state_id", "queue, state, id"),
               ("caravel_jobs_tenant_id_state_id", "tenant_id, state, id"))


def _prune_index(db, columns):
    dialect = dialect_of(db)
    db.execute_sql(dialect.drop_index(PRUNE, JOBS))
    where = " WHERE finished_at IS NOT NULL" if dialect.partial_indexes else ""
    db.execute_sql(f"CREATE INDEX {PRUNE} ON {JOBS} ({columns}){where}")


def up(migrator, db):
    dialect = dialect_of(db)

    class FailureRecord(Model):
        job_id = CharField(max_length=36)
        seq = IntegerField()
        queue = exact_text(dialect, 64)
        failed_at = BigIntegerField()
        attempt = IntegerField()
        replays = IntegerField()
        category = CharField(max_length=32)
        error_type = CharField(max_length=255, null=True)
        site = CharField(max_length=255, null=True)
        description = TextField(null=True)

        class Meta:
            database = db
            table_name = FAILURES
            legacy_table_names = False  # index names after the table (see 0001)
            primary_key = CompositeKey("job_id", "seq")
            indexes = ((("failed_at", "queue"), False),)

    db.create_tables([FailureRecord], safe=False)
    for name, columns in NEW_INDEXES:
        db.execute_sql(f"CREATE INDEX {name} ON {JOBS} ({columns})")
    _prune_index(db, "state, finished_at, queue")


def down(migrator, db):
    dialect = dialect_of(db)
    _prune_index(db, "state, finished_at")
    for name, _ in NEW_INDEXES:
        db.execute_sql(dialect.drop_index(name, JOBS))
    db.execute_sql(f"DROP TABLE {FAILURES}")
