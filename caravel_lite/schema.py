"""Table definitions shared by the migration scripts and the runtime models.

The column lists live here once; migration scripts build *frozen* copies from
``job_columns()``/``outbox_columns()`` as of their revision, and the runtime models
come from :func:`bind_models`. Instants are BIGINT epoch milliseconds everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple, Type

import peewee

from caravel_lite.dialect import Dialect, dialect_of
from caravel_lite.values import JobState

JOBS_TABLE = "caravel_jobs"
OUTBOX_TABLE = "caravel_outbox"
FAILURES_TABLE = "caravel_failures"
SLOTS_TABLE = "caravel_slots"
HISTORY_TABLE = "caravel_migrations"
PAUSED_TABLE = "caravel_paused_queues"
WORKERS_TABLE = "caravel_workers"
WORKFLOWS_TABLE = "caravel_workflows"
WORKFLOW_JOBS_TABLE = "caravel_workflow_jobs"

# A Model subclass whose columns are set at run time: a type checker cannot see them.
RuntimeModel = Any


def exact_text(dialect: Dialect, max_length: int, **kwargs: Any) -> peewee.CharField:
    """A VARCHAR that compares exactly (case and trailing spaces) on every database."""
    return peewee.CharField(max_length=max_length, collation=dialect.exact_collation, **kwargs)


def payload_field(dialect: Dialect) -> peewee.TextField:
    """A text column that holds at least 1 MiB (MEDIUMTEXT on MariaDB/MySQL, whose TEXT
    stops at 64 KiB)."""
    cls: Type[peewee.TextField] = type("PayloadField", (peewee.TextField,),
                                       {"field_type": dialect.payload_type})
    return cls()


def JOB_OPTIONS_FIELD() -> peewee.CharField:
    """A job's stored options (short canonical JSON), NULL for most jobs."""
    return peewee.CharField(max_length=255, null=True)


def result_field(dialect: Dialect) -> peewee.TextField:
    """A kept return value: up to 1 MiB, as a payload (MEDIUMTEXT on MariaDB/MySQL)."""
    cls: Type[peewee.TextField] = type("ResultField", (peewee.TextField,),
                                       {"field_type": dialect.payload_type})
    return cls(null=True)


def _envelope_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    """Columns a job and an outbox intent share."""
    return {
        "id": peewee.CharField(max_length=36, primary_key=True),
        "queue": exact_text(dialect, 64),
        "tenant_id": exact_text(dialect, 128),
        # The caller's key; a debounced job's holds the id of the enqueue call that
        # last wrote it instead (caravel_lite.debounce: a lost reply's recovery).
        "idempotency_key": exact_text(dialect, 128, null=True),
        # sha256 of (queue, tenant, key); NULL without a key. Its unique index, which
        # settles races, is declared with each table's indexes (job_indexes(),
        # OUTBOX_INDEXES).
        "dedup_key": peewee.CharField(max_length=64, null=True),
        "wire_name": exact_text(dialect, 128),
        "payload": payload_field(dialect),
        "priority": peewee.SmallIntegerField(),
        "available_at": peewee.BigIntegerField(),
        "max_attempts": peewee.IntegerField(),
    }


def job_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    """The jobs table's columns. Where ``dialect.without_rowid`` (SQLite), migration
    0005 stores the table as one B-tree keyed by ``id`` (WITHOUT ROWID)."""
    columns = _envelope_columns(dialect)
    columns.update({
        "state": peewee.CharField(max_length=16),
        "enqueued_at": peewee.BigIntegerField(),
        "attempts": peewee.IntegerField(default=0),
        "lease_token": peewee.CharField(max_length=32, null=True),
        "lease_expires_at": peewee.BigIntegerField(null=True),
        "claimed_at": peewee.BigIntegerField(null=True),
        "renewals": peewee.IntegerField(default=0),
        "last_failure": peewee.CharField(max_length=32, null=True),
        "replay_count": peewee.IntegerField(default=0),
        "updated_at": peewee.BigIntegerField(),
        "finished_at": peewee.BigIntegerField(null=True),
        # Migration 0008: the options decided at enqueue beyond max_attempts
        # (caravel_lite.job_options), and a kept return value (caravel_lite.results).
        "job_options": JOB_OPTIONS_FIELD(),
        "result": result_field(dialect),
        # Migration 0009: an operator's cancel request for a leased job, and the
        # progress its handler last reported (caravel_lite.cancel, .progress).
        "cancel_requested_at": peewee.BigIntegerField(null=True),
        "progress_done": peewee.BigIntegerField(null=True),
        "progress_total": peewee.BigIntegerField(null=True),
        "progress_at": peewee.BigIntegerField(null=True),
        # Flow control (migration 0010, caravel_lite.limits): NULL unless the job was
        # enqueued into a gated queue; its group (tenant, key or '') and its key.
        "flow_group": exact_text(dialect, 192, null=True),
        "concurrency_key": exact_text(dialect, 128, null=True),
        # The enqueuing span's W3C trace context (migration 0011; caravel_lite.tracing).
        "trace_context": peewee.TextField(null=True),
    })
    return columns


def generated_job_columns(dialect: Dialect) -> Tuple[str, ...]:
    """Columns of the jobs table the server computes (migration 0013: flow_state, the
    state of a grouped job, else NULL, for the flow index where it holds every row).
    Only the gated claim names them; the runtime model leaves them out, so its reads
    are the same before and after the migration that adds them."""
    return () if dialect.flow_state == "state" else (dialect.flow_state,)


@dataclass(frozen=True)
class IndexSpec:
    """One index of a table as the migrations created it: its name, columns,
    uniqueness and, for a partial index, the predicate of the rows it holds (SQL text
    that SQLite and PostgreSQL read alike)."""

    name: str
    columns: Tuple[str, ...]
    unique: bool = False
    where: Optional[str] = None


def _name(table: str, columns: Sequence[str]) -> str:
    # Peewee's own naming (table_column_column...), which migrations 0001/0002 used.
    return "_".join((table, *columns))


_LEASED = JobState.LEASED.value

# The claim reads (queue, state='pending', priority, available_at, enqueued_at, id) in
# index order, so completed and dead-lettered history, whatever its size, is never
# scanned. It holds every row (also for counts and sizes by queue and state).
CLAIM_INDEX = IndexSpec(
    _name(JOBS_TABLE, ("queue", "state", "priority", "available_at", "enqueued_at", "id")),
    ("queue", "state", "priority", "available_at", "enqueued_at", "id"))
# The three below are partial where the dialect allows it (migration 0004): a commit
# writes to every index its rows are in (on SQLite in WAL mode, a page per B-tree),
# and these serve queries about a few rows only, so the other rows are left out of
# them. They keep 0001's names (the lease index's still names state, which its
# predicate now fixes).
DEDUP_INDEX = _name(JOBS_TABLE, ("dedup_key",))
LEASE_INDEX = _name(JOBS_TABLE, ("queue", "state", "lease_expires_at"))
PRUNE_INDEX = _name(JOBS_TABLE, ("state", "finished_at"))
# Jobs newest first (ids begin with their creation millisecond) by queue or tenant, one
# state at a time, in index order (migration 0006; QueueAdmin.jobs). Every job is
# written pending, so where indexes can be partial these leave pending jobs out
# (migration 0007: an enqueue writes no entry in them); pending jobs are listed
# through the claim index (listing_index).
_PENDING = JobState.PENDING.value
QUEUE_LISTING = IndexSpec(_name(JOBS_TABLE, ("queue", "state", "id")), ("queue", "state", "id"))
TENANT_LISTING = IndexSpec(_name(JOBS_TABLE, ("tenant_id", "state", "id")),
                           ("tenant_id", "state", "id"))
QUEUE_LISTING_PARTIAL = IndexSpec(QUEUE_LISTING.name, QUEUE_LISTING.columns,
                                  where=f"state <> '{_PENDING}'")
TENANT_LISTING_PARTIAL = IndexSpec(TENANT_LISTING.name, TENANT_LISTING.columns,
                                   where=f"state <> '{_PENDING}'")
# A gated queue's claim (caravel_lite.fairness) finds the next group with pending jobs
# and that group's best due job, each one seek. Where indexes can be partial only
# grouped jobs have an entry, so an enqueue into another queue writes none (0010).
FLOW_COLUMNS = ("queue", "state", "flow_group", "priority", "available_at", "enqueued_at",
                "id")
FLOW_INDEX = IndexSpec(_name(JOBS_TABLE, ("flow_group",)), FLOW_COLUMNS)
FLOW_INDEX_PARTIAL = IndexSpec(FLOW_INDEX.name, FLOW_COLUMNS,
                               where="flow_group IS NOT NULL")
# Where it holds every row (MariaDB, MySQL) it keys on flow_state instead of state
# (migration 0013, Dialect.flow_state), so an ungrouped job's entry never moves.
FLOW_INDEX_GENERATED = IndexSpec(FLOW_INDEX.name, ("queue", "flow_state", *FLOW_COLUMNS[2:]))
PARTIAL_JOB_INDEXES: Tuple[IndexSpec, ...] = (
    CLAIM_INDEX,
    # Idempotency: the unique index settles enqueue races on (queue, tenant, key).
    # Most jobs have no key (NULL, never a collision) and write no entry;
    # ``dedup_key = ?`` and ``dedup_key IN (...)`` imply the predicate.
    IndexSpec(DEDUP_INDEX, ("dedup_key",), unique=True, where="dedup_key IS NOT NULL"),
    # The sweep of expired leases reads (queue, state='leased', lease_expires_at <= now)
    # and the waiter the earliest expiry: only leased rows, so only they have an entry
    # (enqueue writes none, a completion removes one).
    IndexSpec(LEASE_INDEX, ("queue", "lease_expires_at"), where=f"state = '{_LEASED}'"),
    # Pruning reads (state IN (completed, dead_letter), finished_at < cutoff): only
    # finished rows have a finished_at, so pending and leased rows have no entry.
    # queue (migration 0006) makes it cover jobs finished per minute and queue.
    IndexSpec(PRUNE_INDEX, ("state", "finished_at", "queue"), where="finished_at IS NOT NULL"),
    QUEUE_LISTING_PARTIAL,
    TENANT_LISTING_PARTIAL,
    FLOW_INDEX_PARTIAL,
)
# The same indexes holding every row, where there are no partial indexes (MariaDB,
# MySQL), as migration 0001 created them and 0004 keeps them there.
FULL_JOB_INDEXES: Tuple[IndexSpec, ...] = (
    CLAIM_INDEX,
    IndexSpec(DEDUP_INDEX, ("dedup_key",), unique=True),
    IndexSpec(LEASE_INDEX, ("queue", "state", "lease_expires_at")),
    IndexSpec(PRUNE_INDEX, ("state", "finished_at", "queue")),
    QUEUE_LISTING,
    TENANT_LISTING,
    FLOW_INDEX_GENERATED,
)


def job_indexes(dialect: Dialect) -> Tuple[IndexSpec, ...]:
    """The jobs table's indexes on a database of this dialect, once migrated."""
    return PARTIAL_JOB_INDEXES if dialect.partial_indexes else FULL_JOB_INDEXES


def listing_index(dialect: Dialect, state: str, by_tenant: bool) -> Optional[IndexSpec]:
    """The index that lists the jobs of one state newest first, by tenant or else by
    queue, as this dialect's migrations left it; None for pending jobs by tenant where
    the listings leave pending jobs out (no index is led by tenant for them).

    Pending jobs by queue are then read through the claim index, led by (queue, state)
    too: in claim order, so a page is sorted (the cost follows the queue's pending
    jobs). A statement reading a partial index repeats its predicate word for word,
    which is how SQLite's planner knows the index holds the rows."""
    if not dialect.partial_indexes:
        return TENANT_LISTING if by_tenant else QUEUE_LISTING
    if state == _PENDING:
        return None if by_tenant else CLAIM_INDEX
    return TENANT_LISTING_PARTIAL if by_tenant else QUEUE_LISTING_PARTIAL


def outbox_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    columns = _envelope_columns(dialect)
    columns.update({
        "staged_at": peewee.BigIntegerField(),
        "dispatched_at": peewee.BigIntegerField(null=True),
        "job_id": peewee.CharField(max_length=36, null=True),
        "set_aside_reason": peewee.CharField(max_length=32, null=True),
        "set_aside_at": peewee.BigIntegerField(null=True),
        "job_options": JOB_OPTIONS_FIELD(),  # migration 0008
        "trace_context": peewee.TextField(null=True),  # migration 0011
    })
    return columns


OUTBOX_INDEXES: Tuple[IndexSpec, ...] = (
    # The relay reads undispatched, not set-aside intents oldest first.
    IndexSpec(_name(OUTBOX_TABLE, ("dispatched_at", "set_aside_at", "staged_at", "id")),
              ("dispatched_at", "set_aside_at", "staged_at", "id")),
    # Idempotency of staging, as for jobs (a full index: 0002 created it so).
    IndexSpec(_name(OUTBOX_TABLE, ("dedup_key",)), ("dedup_key",), unique=True),
)


def build_model(db: peewee.Database, table: str, columns: Dict[str, peewee.Field],
                indexes: Sequence[IndexSpec] = (),
                primary_key: Optional[Tuple[str, ...]] = None) -> RuntimeModel:
    """A Peewee model bound to ``db`` for ``table`` with the given columns and indexes
    (declared, as the migrations created them; the model never creates them).
    ``primary_key`` names the columns of a composite key."""
    meta_attrs: Dict[str, Any] = {"database": db, "table_name": table,
                                  "legacy_table_names": False}
    if primary_key is not None:
        meta_attrs["primary_key"] = peewee.CompositeKey(*primary_key)
    meta = type("Meta", (), meta_attrs)
    attrs: Dict[str, Any] = dict(columns)
    attrs["Meta"] = meta
    attrs["__module__"] = __name__
    name = "".join(part.title() for part in table.split("_"))
    model: RuntimeModel = type(name, (peewee.Model,), attrs)
    for spec in indexes:
        # A generated column (generated_job_columns) is no field: named as SQL text.
        model.add_index(peewee.ModelIndex(
            model, [model._meta.columns.get(c) or peewee.SQL(c) for c in spec.columns],
            unique=spec.unique,
            where=peewee.SQL(spec.where) if spec.where else None, name=spec.name))
    return model


def bind_models(db: peewee.Database) -> Tuple[RuntimeModel, RuntimeModel]:
    """Runtime (jobs, outbox) models bound to ``db``. Never creates tables."""
    dialect = dialect_of(db)
    jobs = build_model(db, JOBS_TABLE, job_columns(dialect), job_indexes(dialect))
    outbox = build_model(db, OUTBOX_TABLE, outbox_columns(dialect), OUTBOX_INDEXES)
    return jobs, outbox


def failure_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    """The failure history (migration 0006): one row per failed attempt, keyed by
    (job_id, seq), seq counting the job's recorded failures from 1. Never a message
    or a payload: the exception's type and the site it was raised at, and a text only
    when the application's ``describe_failure`` returned one."""
    return {
        "job_id": peewee.CharField(max_length=36),
        "seq": peewee.IntegerField(),
        "queue": exact_text(dialect, 64),
        "failed_at": peewee.BigIntegerField(),
        "attempt": peewee.IntegerField(),
        # The job's replay_count when the attempt failed: attempts restart at 1 after
        # a replay, so (replays, attempt) names one attempt.
        "replays": peewee.IntegerField(),
        "category": peewee.CharField(max_length=32),
        "error_type": peewee.CharField(max_length=255, null=True),
        "site": peewee.CharField(max_length=255, null=True),
        "description": peewee.TextField(null=True),
        # Migration 0009: only with QueueOptions(record_errors=True).
        "message": peewee.TextField(null=True),
        "trace": peewee.TextField(null=True),
    }


FAILURES_KEY = ("job_id", "seq")
FAILURE_INDEXES: Tuple[IndexSpec, ...] = (
    # Failed attempts per minute (stats): a range of failed_at, queue read from the
    # index itself.
    IndexSpec(_name(FAILURES_TABLE, ("failed_at", "queue")), ("failed_at", "queue")),
)


def failures_model(db: peewee.Database) -> RuntimeModel:
    """The runtime model of the failure history, bound to ``db``. Never creates it."""
    return build_model(db, FAILURES_TABLE, failure_columns(dialect_of(db)),
                       FAILURE_INDEXES, primary_key=FAILURES_KEY)


def paused_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    """Paused queues (migration 0009): one row per queue no worker claims from."""
    return {"queue": exact_text(dialect, 64, primary_key=True),
            "paused_at": peewee.BigIntegerField()}


def worker_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    """Worker heartbeats (migration 0009): one row per running worker, refreshed each
    beat, removed by a clean stop (caravel_lite.heartbeats)."""
    return {
        "worker_id": peewee.CharField(max_length=16, primary_key=True),
        "host": peewee.CharField(max_length=255),
        "pid": peewee.IntegerField(),
        "queues": peewee.TextField(),
        "concurrency": peewee.IntegerField(),
        "version": peewee.CharField(max_length=32),
        "started_at": peewee.BigIntegerField(),
        "last_seen_at": peewee.BigIntegerField(),
        "running": peewee.IntegerField(),
    }


def control_models(db: peewee.Database) -> Tuple[RuntimeModel, RuntimeModel]:
    """The runtime models of the paused queues and the worker heartbeats, bound to
    ``db``. Never creates them."""
    dialect = dialect_of(db)
    return (build_model(db, PAUSED_TABLE, paused_columns(dialect)),
            build_model(db, WORKERS_TABLE, worker_columns(dialect)))


def slot_columns() -> Dict[str, peewee.Field]:
    """The slots of concurrency and rate limits (migration 0010, caravel_lite.slots):
    one row per (scope, slot), scope a digest of the limit (kind, queue, key or type).
    ``holder``/``token``: the job and lease that took it; ``taken_at``: when;
    ``expires_at``: the lease expiry it was taken with."""
    return {
        "scope": peewee.CharField(max_length=64),
        "slot": peewee.IntegerField(),
        "holder": peewee.CharField(max_length=36, null=True),
        "token": peewee.CharField(max_length=32, null=True),
        # The holder's attempt count once its claim is committed.
        "attempt": peewee.IntegerField(default=0),
        "taken_at": peewee.BigIntegerField(),
        "expires_at": peewee.BigIntegerField(),
    }


SLOTS_KEY = ("scope", "slot")
SLOT_INDEXES: Tuple[IndexSpec, ...] = (
    # A limit's free slots, oldest taken first (caravel_lite.slots).
    IndexSpec(_name(SLOTS_TABLE, ("scope", "taken_at")), ("scope", "taken_at")),
)


def slots_model(db: peewee.Database) -> RuntimeModel:
    """The runtime model of the limits' slots, bound to ``db``. Never creates it."""
    return build_model(db, SLOTS_TABLE, slot_columns(), SLOT_INDEXES, primary_key=SLOTS_KEY)


def workflow_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    """Chains and batches (migration 0012, caravel_lite.workflows): one row each.
    ``total``: its jobs (a chain's steps, a batch's members, never its callbacks);
    ``finished``: how many have been counted final (a chain counts its completed
    steps); ``failed``: how many of them failed (a batch's dead-lettered, discarded or
    cancelled members). The callbacks' ids (held jobs until the batch decides them);
    ``closed_at``: when the last job was counted."""
    return {
        "id": peewee.CharField(max_length=36, primary_key=True),
        "kind": peewee.CharField(max_length=8),
        "queue": exact_text(dialect, 64),
        "tenant_id": exact_text(dialect, 128),
        "total": peewee.IntegerField(),
        "finished": peewee.IntegerField(default=0),
        "failed": peewee.IntegerField(default=0),
        "on_complete": peewee.CharField(max_length=36, null=True),
        "on_success": peewee.CharField(max_length=36, null=True),
        "on_failure": peewee.CharField(max_length=36, null=True),
        "created_at": peewee.BigIntegerField(),
        "closed_at": peewee.BigIntegerField(null=True),
    }


WORKFLOW_INDEXES: Tuple[IndexSpec, ...] = (
    # Chains or batches of a queue, newest first (ids begin with their millisecond).
    IndexSpec(_name(WORKFLOWS_TABLE, ("queue", "kind", "id")), ("queue", "kind", "id")),
)


def workflow_job_columns() -> Dict[str, peewee.Field]:
    """A chain's steps and a batch's members in order: (workflow_id, position) -> job."""
    return {
        "workflow_id": peewee.CharField(max_length=36),
        "position": peewee.IntegerField(),
        "job_id": peewee.CharField(max_length=36),
    }


WORKFLOW_JOBS_KEY = ("workflow_id", "position")


def workflow_models(db: peewee.Database) -> Tuple[RuntimeModel, RuntimeModel]:
    """The runtime models of the workflows and their jobs, bound to ``db``. Never
    creates them."""
    return (build_model(db, WORKFLOWS_TABLE, workflow_columns(dialect_of(db)),
                        WORKFLOW_INDEXES),
            build_model(db, WORKFLOW_JOBS_TABLE, workflow_job_columns(),
                        primary_key=WORKFLOW_JOBS_KEY))
