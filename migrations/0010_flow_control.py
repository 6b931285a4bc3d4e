"""Flow control (caravel_lite.limits): fair claiming, concurrency and rate limits.

The jobs table gains two nullable columns, NULL for every job written before this
script and for every job of a queue that declares no flow control:

- ``flow_group``: the group a gated queue claims by (the tenant in a fair queue, else
  ``key:`` and the concurrency key, ``type:`` and a rate-limited type's name, or the
  empty group);
- ``concurrency_key``: the job's ``Dispatch(concurrency_key=...)``.

and one index, ``caravel_jobs_flow_group`` on (queue, state, flow_group, priority,
available_at, enqueued_at, id): the next group with pending jobs and a group's best
due job are one seek each. Where indexes can be partial (SQLite, PostgreSQL) it holds
only rows with a group (``WHERE flow_group IS NOT NULL``), so an enqueue into an
ungated queue writes no entry in it; on MariaDB/MySQL it holds every row.

``caravel_slots`` holds the slots of the limits: one row per (scope, slot), created
when first taken, and an index on (scope, taken_at): a limit's free slots are found
oldest taken first, a rate limit's as a range of it. Adding nullable columns rewrites no row (SQLite, PostgreSQL 11+ and
MariaDB 10.3+ add them in place); building the index reads the table once under its
lock. Code from before this script never reads or writes the new columns: its
statements name their columns, so they run unchanged against the new schema.
"""
from peewee import BigIntegerField, CharField, CompositeKey, IntegerField, Model

from caravel_lite.dialect import dialect_of
from caravel_lite.schema import exact_text

# Frozen as of this revision.
JOBS = "caravel_jobs"
SLOTS = "caravel_slots"
INDEX = "caravel_jobs_flow_group"
INDEX_COLUMNS = "queue, state, flow_group, priority, available_at, enqueued_at, id"
COLUMNS = (("flow_group", 192), ("concurrency_key", 128))


def up(migrator, db):
    dialect = dialect_of(db)
    for name, length in COLUMNS:
        field = exact_text(dialect, length, null=True)
        field.name = field.column_name = name
        db.execute_sql(f"ALTER TABLE {JOBS} ADD COLUMN {_column_sql(db, field)}")
    where = " WHERE flow_group IS NOT NULL" if dialect.partial_indexes else ""
    db.execute_sql(f"CREATE INDEX {INDEX} ON {JOBS} ({INDEX_COLUMNS}){where}")

    class Slot(Model):
        scope = CharField(max_length=64)
        slot = IntegerField()
        holder = CharField(max_length=36, null=True)
        token = CharField(max_length=32, null=True)
        attempt = IntegerField(default=0)
        taken_at = BigIntegerField()
        expires_at = BigIntegerField()

        class Meta:
            database = db
            table_name = SLOTS
            legacy_table_names = False
            primary_key = CompositeKey("scope", "slot")
            indexes = ((("scope", "taken_at"), False),)

    db.create_tables([Slot], safe=False)


def _column_sql(db, field):
    context = db.get_sql_context()
    return context.sql(field.ddl(context)).query()[0]


def down(migrator, db):
    dialect = dialect_of(db)
    db.execute_sql(f"DROP TABLE {SLOTS}")
    db.execute_sql(dialect.drop_index(INDEX, JOBS))
    for name, _ in COLUMNS:
        db.execute_sql(f"ALTER TABLE {JOBS} DROP COLUMN {name}")
