"""Store the jobs table as one B-tree keyed by job id, where the dialect can (SQLite).

A SQLite table whose primary key is text is a rowid B-tree plus a separate index on
the key, so every enqueue wrote one page more per commit than the row needs. Declared
WITHOUT ROWID the table is the key's B-tree itself, as InnoDB stores every table
(docs/PERFORMANCE.md has SQLite runs before and after it). SQLite cannot change that in place:
the table is rebuilt in this script's transaction (new table, rows copied, old table
dropped, new one renamed) and its indexes are created again from their own stored
SQL, so the indexes of 0001/0004, and any an operator added, come back unchanged.
Other writers wait for the rebuild; on a large table it takes a while.

Elsewhere this script changes nothing; it is still recorded as applied, so every
database has the same migration history.
"""
from peewee import BigIntegerField, CharField, IntegerField, Model, SmallIntegerField

from caravel_lite.dialect import dialect_of
from caravel_lite.schema import exact_text, payload_field

TABLE = "caravel_jobs"
REBUILT = "caravel_jobs_rebuilt"


def _frozen_jobs(db, table, without_rowid):
    """The jobs table's columns as of this revision (those of 0001)."""
    dialect = dialect_of(db)

    class Job(Model):
        id = CharField(max_length=36, primary_key=True)
        queue = exact_text(dialect, 64)
        tenant_id = exact_text(dialect, 128)
        idempotency_key = exact_text(dialect, 128, null=True)
        dedup_key = CharField(max_length=64, null=True)
        wire_name = exact_text(dialect, 128)
        payload = payload_field(dialect)
        priority = SmallIntegerField()
        available_at = BigIntegerField()
        max_attempts = IntegerField()
        state = CharField(max_length=16)
        enqueued_at = BigIntegerField()
        attempts = IntegerField(default=0)
        lease_token = CharField(max_length=32, null=True)
        lease_expires_at = BigIntegerField(null=True)
        claimed_at = BigIntegerField(null=True)
        renewals = IntegerField(default=0)
        last_failure = CharField(max_length=32, null=True)
        replay_count = IntegerField(default=0)
        updated_at = BigIntegerField()
        finished_at = BigIntegerField(null=True)

        class Meta:
            database = db
            table_name = table
            legacy_table_names = False

    Job._meta.without_rowid = without_rowid
    return Job


def _rebuild(db, without_rowid):
    indexes = [sql for (sql,) in db.execute_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ? "
        "AND sql IS NOT NULL ORDER BY name", (TABLE,)).fetchall()]
    model = _frozen_jobs(db, REBUILT, without_rowid)
    db.create_tables([model], safe=False)
    columns = ", ".join(f'"{name}"' for name in model._meta.columns)
    db.execute_sql(f"INSERT INTO {REBUILT} ({columns}) SELECT {columns} FROM {TABLE}")
    db.execute_sql(f"DROP TABLE {TABLE}")
    db.execute_sql(f"ALTER TABLE {REBUILT} RENAME TO {TABLE}")
    for sql in indexes:
        db.execute_sql(sql)


def up(migrator, db):
    if dialect_of(db).without_rowid:
        _rebuild(db, True)


def down(migrator, db):
    if dialect_of(db).without_rowid:
        _rebuild(db, False)
