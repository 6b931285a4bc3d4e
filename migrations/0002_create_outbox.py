"""Create the transactional outbox table (used in the application's database)."""
from peewee import BigIntegerField, CharField, IntegerField, Model, SmallIntegerField

from caravel_lite.dialect import dialect_of
from caravel_lite.schema import exact_text, payload_field


def up(migrator, db):
    dialect = dialect_of(db)

    class Intent(Model):
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
        staged_at = BigIntegerField()
        dispatched_at = BigIntegerField(null=True)
        job_id = CharField(max_length=36, null=True)
        set_aside_reason = CharField(max_length=32, null=True)
        set_aside_at = BigIntegerField(null=True)

        class Meta:
            database = db
            table_name = "caravel_outbox"
            # Name indexes after the table (caravel_outbox_...), as the runtime models
            # do, not after this frozen class (see 0001_create_jobs).
            legacy_table_names = False
            indexes = (
                (("dispatched_at", "set_aside_at", "staged_at", "id"), False),
            )

    db.create_tables([Intent], safe=False)


def down(migrator, db):
    db.execute_sql("DROP TABLE caravel_outbox")
