"""What the documentation's excerpts take as given: an application's job types, a
migrated SQLite database in the current directory, its queue and an operator's view.
A page brings them in with a hidden setup block (tests/docs/examples.py):

    <!-- example: setup
    from tests.docs.world import *
    -->
"""
from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta

import peewee

import caravel_lite as cl
from caravel_lite import (DatabaseQueue, Dispatch, Failure, JobContext, JobRegistry, JobState,
                          QueueAdmin, QueueOptions, QueueWorker)

__all__ = ["cl", "threading", "uuid", "dataclass", "timedelta", "DatabaseQueue", "Dispatch",
           "Failure", "JobContext", "JobRegistry", "JobState", "QueueAdmin", "QueueOptions",
           "QueueWorker", "GenerateReport", "SweepCache", "Charge", "Payment", "registry", "db",
           "queue", "admin",
           "tenant", "rid", "report_id", "REPORT_ID", "job_id"]


@dataclass(frozen=True)
class GenerateReport:
    report_id: uuid.UUID


@dataclass(frozen=True)
class SweepCache:
    pass


@dataclass(frozen=True)
class Charge:
    amount: int


registry = cl.JobRegistry()


@registry.job("reports.generate.v1", GenerateReport)
def generate_report(job: GenerateReport, ctx: cl.JobContext) -> None:
    pass


@registry.job("cache.sweep.v1", SweepCache)
def sweep_cache(job: SweepCache, ctx: cl.JobContext) -> None:
    pass


db = cl.open_database("sqlite:///world.db")
cl.migrate(db)
queue = cl.DatabaseQueue(db, registry)
admin = cl.QueueAdmin(db)


class Payment(peewee.Model):
    """An application's table, in the queue's database: one row per charge's job."""

    job_id = peewee.CharField(unique=True)
    tenant = peewee.CharField()
    amount = peewee.IntegerField()

    class Meta:
        database = db


db.create_tables([Payment])
tenant = "tenant-42"
rid = report_id = REPORT_ID = uuid.UUID("0b7e8c3a-5d2f-4e61-9a40-3c1f6d2b8e75")
job_id = queue.enqueue(GenerateReport(rid), cl.Dispatch("reports", tenant_id=tenant)).job_id
