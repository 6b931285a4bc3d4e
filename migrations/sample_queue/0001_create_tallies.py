"""Create the sample's tallies table in the *queue's* database: its second handler
writes there inside ``ctx.transaction()``, so the write and the job's completion commit
together. No key on job_id, on purpose: the handler never checks for an earlier run,
so a job whose effect landed twice would show as two rows (``--tally-report``)."""
from peewee import BigIntegerField, CharField, IntegerField, Model


def up(migrator, db):
    class Tally(Model):
        job_id = CharField(max_length=36, index=True)
        tenant_id = CharField(max_length=128)
        quantity = IntegerField()
        recorded_at = BigIntegerField()

        class Meta:
            database = db
            table_name = "sample_tallies"
            primary_key = False
            legacy_table_names = False

    db.create_tables([Tally], safe=False)


def down(migrator, db):
    db.execute_sql("DROP TABLE sample_tallies")
