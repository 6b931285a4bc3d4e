"""caravel_lite: a durable background-job queue in your own SQL database, via Peewee.

Importing this package has no side effects: no connection, no table, no global state.

It imports Peewee and the exceptions (:mod:`caravel_lite.errors`) and nothing else:
every other public name is imported from its module on first access (PEP 562), so a
short process (a cron job, a script) pays at its start for the parts it uses and not
for the rest (the operators' :class:`QueueAdmin`, the outbox and its relay, the
scheduler, the worker when it only enqueues). ``from caravel_lite import
DatabaseQueue`` works as before, and type checkers see every name through the imports
under ``TYPE_CHECKING``. Optional integrations (OpenTelemetry, the database drivers,
cronsim) are imported by no module at its import.
"""
from __future__ import annotations

from caravel_lite.errors import (CaravelError, DatabaseBusy, InvalidField, LeaseLost,
                                 OutsideTransaction, QueueIdempotencyConflict, SchemaNotReady,
                                 StatementTooLarge, UnknownJobType)

# typing.TYPE_CHECKING without importing typing (which Peewee does not import either):
# type checkers treat this name as true, the interpreter never runs the block.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List

    from caravel_lite.admin import QueueAdmin
    from caravel_lite.dialect import open_database
    from caravel_lite.migrator import check_schema, migrate
    from caravel_lite.options import QueueOptions
    from caravel_lite.outbox import QueueOutbox, StageResult
    from caravel_lite.outcomes import Discard, Snooze
    from caravel_lite.queue import DatabaseQueue
    from caravel_lite.registry import JobRegistry
    from caravel_lite.relay import OutboxRelay
    from caravel_lite.scheduler import QueueScheduler
    from caravel_lite.values import (Cancelled, ClaimBatch, Dispatch, EnqueueResult, Failure,
                                     JobContext, JobResult, JobState, JobStatus, PeekedJob,
                                     Priority, QueueCounts, QueueLease)
    from caravel_lite.worker import QueueWorker
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

# Each name imported on first access, and its module (the same as the imports above).
_MODULES: Dict[str, str] = {
    "JobRegistry": "caravel_lite.registry",
    "DatabaseQueue": "caravel_lite.queue",
    "QueueOptions": "caravel_lite.options",
    "QueueWorker": "caravel_lite.worker",
    "Snooze": "caravel_lite.outcomes",
    "Discard": "caravel_lite.outcomes",
    "QueueOutbox": "caravel_lite.outbox",
    "StageResult": "caravel_lite.outbox",
    "OutboxRelay": "caravel_lite.relay",
    "QueueScheduler": "caravel_lite.scheduler",
    "QueueAdmin": "caravel_lite.admin",
    "migrate": "caravel_lite.migrator",
    "check_schema": "caravel_lite.migrator",
    "open_database": "caravel_lite.dialect",
    **{name: "caravel_lite.values" for name in (
        "JobContext", "Dispatch", "Priority", "EnqueueResult", "QueueLease", "ClaimBatch",
        "JobStatus", "QueueCounts", "JobState", "Failure", "PeekedJob", "Cancelled",
        "JobResult")},
    **{name: "caravel_lite.workflows" for name in (
        "ChainResult", "BatchResult", "BatchStatus", "WorkflowSummary")},
}

if not TYPE_CHECKING:  # hidden from type checkers: an unknown name stays an error there
    def __getattr__(name: str) -> Any:
        module = _MODULES.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        import importlib

        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # resolved once: later look-ups find it directly
        return value

    def __dir__() -> List[str]:
        return sorted(set(globals()) | set(__all__))
