"""caravel_lite: a durable background-job queue in your own SQL database, via Peewee.

Importing this package has no side effects: no connection, no table, no global state.
"""
from caravel_lite.errors import (CaravelError, DatabaseBusy, InvalidField,
                                 OutsideTransaction, QueueIdempotencyConflict, SchemaNotReady,
                                 StatementTooLarge, UnknownJobType)
from caravel_lite.migrator import check_schema, migrate
from caravel_lite.options import QueueOptions
from caravel_lite.queue import DatabaseQueue
from caravel_lite.registry import JobRegistry
from caravel_lite.values import (Cancelled, ClaimBatch, Dispatch, EnqueueResult, Failure,
                                 JobContext, JobState, JobStatus, PeekedJob, Priority,
                                 QueueCounts, QueueLease)
from caravel_lite.dialect import open_database
from caravel_lite.worker import QueueWorker
from caravel_lite.outbox import QueueOutbox, StageResult
from caravel_lite.relay import OutboxRelay
from caravel_lite.outcomes import Discard, Snooze
from caravel_lite.scheduler import QueueScheduler
from caravel_lite.admin import QueueAdmin
from caravel_lite.errors import LeaseLost
from caravel_lite.values import JobResult
from caravel_lite.workflows import BatchResult, BatchStatus, ChainResult, WorkflowSummary

__all__ = [
    "JobRegistry", "JobContext",
    "DatabaseQueue", "QueueOptions", "Dispatch", "Priority",
    "EnqueueResult", "QueueLease", "ClaimBatch", "JobStatus", "QueueCounts", "JobState",
    "Failure", "QueueWorker", "Snooze", "Discard",
    "PeekedJob", "Cancelled",
    "QueueOutbox", "StageResult", "OutboxRelay",
    "QueueScheduler",
    "QueueAdmin",
    "migrate", "check_schema", "open_database",
    "CaravelError", "QueueIdempotencyConflict", "SchemaNotReady", "InvalidField",
    "UnknownJobType", "OutsideTransaction", "DatabaseBusy", "StatementTooLarge",
    "JobResult", "LeaseLost",
    "ChainResult", "BatchResult", "BatchStatus", "WorkflowSummary",
]
