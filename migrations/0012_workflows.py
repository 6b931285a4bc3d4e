"""Chains and batches (caravel_lite.workflows): two new tables, nothing changed in the
jobs table.

- ``caravel_workflows``: one row per chain or batch: its queue and tenant, how many
  jobs it has, how many were counted final and how many of those failed, the ids of a
  batch's callback jobs and when it closed; indexed on (queue, kind, id) for the
  operator's listings, newest first.
- ``caravel_workflow_jobs``: its jobs in order, keyed by (workflow_id, position).

A chain's later steps and a batch's callbacks are ordinary job rows in the new
``held`` state (a state value, no new column): no claim, sweep or listing of other
states reads them. A worker learns that a job belongs to one from the job's stored
options (read with every claim already), so a job outside any workflow costs exactly
what it did. Code from before this script never reads the new tables; it would
complete a chain step without releasing the next (held) one, so chains and batches
are enqueued only once every worker runs the code of this revision.
"""
from peewee import BigIntegerField, CharField, CompositeKey, IntegerField, Model

from caravel_lite.dialect import dialect_of

# Frozen as of this revision.
WORKFLOWS = "caravel_workflows"
WORKFLOW_JOBS = "caravel_workflow_jobs"


def up(migrator, db):
    collation = dialect_of(db).exact_collation

    class Workflow(Model):
        id = CharField(max_length=36, primary_key=True)
        kind = CharField(max_length=8)
        queue = CharField(max_length=64, collation=collation)
        tenant_id = CharField(max_length=128, collation=collation)
        total = IntegerField()
        finished = IntegerField(default=0)
        failed = IntegerField(default=0)
        on_complete = CharField(max_length=36, null=True)
        on_success = CharField(max_length=36, null=True)
        on_failure = CharField(max_length=36, null=True)
        created_at = BigIntegerField()
        closed_at = BigIntegerField(null=True)

        class Meta:
            database = db
            table_name = WORKFLOWS
            legacy_table_names = False
            indexes = ((("queue", "kind", "id"), False),)

    class WorkflowJob(Model):
        workflow_id = CharField(max_length=36)
        position = IntegerField()
        job_id = CharField(max_length=36)

        class Meta:
            database = db
            table_name = WORKFLOW_JOBS
            legacy_table_names = False
            primary_key = CompositeKey("workflow_id", "position")

    db.create_tables([Workflow, WorkflowJob], safe=False)


def down(migrator, db):
    db.execute_sql(f"DROP TABLE {WORKFLOW_JOBS}")
    db.execute_sql(f"DROP TABLE {WORKFLOWS}")
