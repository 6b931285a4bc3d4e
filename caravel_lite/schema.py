"""Table definitions shared by the migration scripts and the runtime models.

The column lists live here once; migration scripts build *frozen* copies from
``job_columns()``/``outbox_columns()`` as of their revision, and the runtime models
come from :func:`bind_models`. Instants are BIGINT epoch milliseconds everywhere.
"""
from __future__ import annotations

from typing import Dict, Tuple, Type

import peewee

from caravel_lite.dialect import Dialect, dialect_of

JOBS_TABLE = "caravel_jobs"
OUTBOX_TABLE = "caravel_outbox"
HISTORY_TABLE = "caravel_migrations"


def exact_text(dialect: Dialect, max_length: int, **kwargs) -> peewee.CharField:
    """A VARCHAR that compares exactly (case and trailing spaces) on every database."""
    return peewee.CharField(max_length=max_length, collation=dialect.exact_collation, **kwargs)


def payload_field(dialect: Dialect) -> peewee.TextField:
    """A text column that holds at least 1 MiB (MEDIUMTEXT on MariaDB/MySQL, whose TEXT
    stops at 64 KiB)."""
    cls = type("PayloadField", (peewee.TextField,), {"field_type": dialect.payload_type})
    return cls()


def _envelope_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    """Columns a job and an outbox intent share."""
    return {
        "id": peewee.CharField(max_length=36, primary_key=True),
        "queue": exact_text(dialect, 64),
        "tenant_id": exact_text(dialect, 128),
        "idempotency_key": exact_text(dialect, 128, null=True),
        # sha256 of (queue, tenant, key): the unique index that settles races.
        "dedup_key": peewee.CharField(max_length=64, null=True, unique=True),
        "wire_name": exact_text(dialect, 128),
        "payload": payload_field(dialect),
        "priority": peewee.SmallIntegerField(),
        "available_at": peewee.BigIntegerField(),
        "max_attempts": peewee.IntegerField(),
    }


def job_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
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
    })
    return columns


# The claim reads (queue, state='pending', priority, available_at, enqueued_at, id) in
# index order, so completed and dead-lettered history, whatever its size, is never
# scanned. The sweep of expired leases reads (queue, state='leased', lease_expires_at).
JOB_INDEXES: Tuple[Tuple[Tuple[str, ...], bool], ...] = (
    (("queue", "state", "priority", "available_at", "enqueued_at", "id"), False),
    (("queue", "state", "lease_expires_at"), False),
    (("state", "finished_at"), False),
)


def outbox_columns(dialect: Dialect) -> Dict[str, peewee.Field]:
    columns = _envelope_columns(dialect)
    columns.update({
        "staged_at": peewee.BigIntegerField(),
        "dispatched_at": peewee.BigIntegerField(null=True),
        "job_id": peewee.CharField(max_length=36, null=True),
        "set_aside_reason": peewee.CharField(max_length=32, null=True),
        "set_aside_at": peewee.BigIntegerField(null=True),
    })
    return columns


OUTBOX_INDEXES: Tuple[Tuple[Tuple[str, ...], bool], ...] = (
    (("dispatched_at", "set_aside_at", "staged_at", "id"), False),
)


def build_model(db: peewee.Database, table: str, columns: Dict[str, peewee.Field],
                indexes=()) -> Type[peewee.Model]:
    """A Peewee model bound to ``db`` for ``table`` with the given columns."""
    meta = type("Meta", (), {"database": db, "table_name": table, "indexes": tuple(indexes),
                             "legacy_table_names": False})
    attrs: dict = dict(columns)
    attrs["Meta"] = meta
    attrs["__module__"] = __name__
    name = "".join(part.title() for part in table.split("_"))
    return type(name, (peewee.Model,), attrs)


def bind_models(db: peewee.Database) -> Tuple[Type[peewee.Model], Type[peewee.Model]]:
    """Runtime (jobs, outbox) models bound to ``db``. Never creates tables."""
    dialect = dialect_of(db)
    jobs = build_model(db, JOBS_TABLE, job_columns(dialect), JOB_INDEXES)
    outbox = build_model(db, OUTBOX_TABLE, outbox_columns(dialect), OUTBOX_INDEXES)
    return jobs, outbox
