"""Create the sample worker's results table, keyed by job id so a re-run counts once."""
from peewee import BigIntegerField, CharField, IntegerField, Model


def up(migrator, db):
    class Result(Model):
        job_id = CharField(max_length=36, primary_key=True)
        tenant_id = CharField(max_length=128)
        queue = CharField(max_length=64)
        quantity = IntegerField()
        recorded_at = BigIntegerField()

        class Meta:
            database = db
            table_name = "sample_results"

    db.create_tables([Result], safe=False)


def down(migrator, db):
    db.execute_sql("DROP TABLE sample_results")
