"""A nullable ``trace_context`` column on jobs and outbox intents: the W3C trace
context (``traceparent`` and, when there is one, ``tracestate``, as a small JSON
object) of the span that was active when the job was enqueued or staged, so that the
worker's span can be related to the request that asked for the job
(``caravel_lite.tracing``).

NULL for every row written before this script, for jobs enqueued while no span was
active, and wherever OpenTelemetry is not installed: a rolling deploy's old code keeps
inserting without it, and the new code treats NULL as "no trace". Adding a nullable
column with no default rewrites no row (PostgreSQL and SQLite change only the
catalogue; MariaDB 10.3+ adds it in place, ALGORITHM=INSTANT). No index: the column is
only read with the row it belongs to.
"""
from peewee import TextField

# Frozen as of this revision.
TABLES = ("caravel_jobs", "caravel_outbox")
COLUMN = "trace_context"


def up(migrator, db):
    migrator.migrate(*[migrator.add_column(table, COLUMN, TextField(null=True)) for table in TABLES])


def down(migrator, db):
    migrator.migrate(*[migrator.drop_column(table, COLUMN) for table in TABLES])
