"""Create the jobs table and the indexes that keep claims flat as history grows."""
from peewee import BigIntegerField, CharField, IntegerField, Model, SmallIntegerField

from caravel_lite.dialect import dialect_of
from caravel_lite.schema import exact_text, payload_field


def up(migrator, db):
    dialect = dialect_of(db)

    class Job(Model):
        id = CharField(max_length=36, primary_key=True)
        queue = exact_text(dialect, 64)
        tenant_id = exact_text(dialect, 128)
        idempotency_key = exact_text(dialect, 128, null=True)
        dedup_key = CharField(max_length=64, null=True, unique=True)
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
            table_name = "caravel_jobs"
            # Name indexes after the table (caravel_jobs_...), as the runtime models do,
            # not after this frozen class: index names share one namespace per schema on
            # PostgreSQL and SQLite, and an application's own `Job` model must not clash.
            legacy_table_names = False
            indexes = (
                (("queue", "state", "priority", "available_at", "enqueued_at", "id"), False),
                (("queue", "state", "lease_expires_at"), False),
                (("state", "finished_at"), False),
            )

    db.create_tables([Job], safe=False)


def down(migrator, db):
    db.execute_sql("DROP TABLE caravel_jobs")
