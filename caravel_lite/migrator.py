"""Applying and checking caravel_lite's schema: the only code that creates tables.

Scripts live in the top-level ``migrations/`` folder (shipped as
``caravel_lite.migrations``) and run through Peewee 4's ``playhouse.migrations``
runner, which records each applied script in a history table.
"""
from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, List, Optional

import peewee

from caravel_lite.dialect import dialect_of
from caravel_lite.errors import SchemaLockTimeout, SchemaNotReady
from caravel_lite.schema import HISTORY_TABLE

if TYPE_CHECKING:
    from playhouse.migrations import Runner


def _package_directory(subpackage: str) -> str:
    location: Optional[str] = None
    try:
        # The scripts' folder is this package only once installed (see setup.cfg).
        location = importlib.import_module("caravel_lite.migrations").__file__
    except ImportError:  # running from a source checkout that is not installed
        pass
    if location is None:
        root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                            "migrations")
    else:
        root = os.path.dirname(os.path.abspath(location))
    return os.path.join(root, subpackage) if subpackage else root


QUEUE_MIGRATIONS = ""
SAMPLE_MIGRATIONS = "sample"
# How long migrate() waits for another process's migration to finish (seconds).
LOCK_TIMEOUT = 600.0

__all__ = ["migrate", "apply", "check_schema", "pending_migrations", "runner",
           "SchemaLockTimeout", "LOCK_TIMEOUT"]


def runner(db: peewee.Database, scripts: str = QUEUE_MIGRATIONS,
           history_table: str = HISTORY_TABLE) -> Runner:
    # Imported here, not at import: playhouse.migrations brings argparse, pickle, bz2
    # and playhouse's field and schema-change modules, which only a migration (or a
    # schema check) uses.
    from playhouse.migrations import Runner

    return Runner(db, directory=_package_directory(scripts), table_name=history_table)


def migrate(db: peewee.Database, *, target: Optional[str] = None,
            lock_timeout: float = LOCK_TIMEOUT) -> List[str]:
    """Bring ``db`` to caravel_lite's current schema (the jobs and outbox tables).

    Applies only pending scripts, in order, and returns their names; running it again
    is a no-op that returns ``[]``. One call serves a queue database, an application
    database holding the outbox, or one database that is both.

    Concurrent calls (two hosts deploying at once) take turns: the whole run holds the
    database's migration lock (PostgreSQL advisory lock, MariaDB/MySQL ``GET_LOCK``,
    SQLite one ``BEGIN IMMEDIATE`` transaction), so one applies the scripts and the
    other waits, then finds nothing pending and returns ``[]``. After ``lock_timeout``
    seconds of waiting it raises :class:`SchemaLockTimeout`, having applied nothing.
    """
    return apply(db, QUEUE_MIGRATIONS, HISTORY_TABLE, target=target,
                 lock_timeout=lock_timeout)


def apply(db: peewee.Database, scripts: str = QUEUE_MIGRATIONS,
          history_table: str = HISTORY_TABLE, *, target: Optional[str] = None,
          lock_timeout: float = LOCK_TIMEOUT) -> List[str]:
    """Apply the pending scripts of ``scripts`` under the migration lock (see
    :func:`migrate`); returns the names applied."""
    with dialect_of(db).migration_lock(db, lock_timeout):
        # The plan is read under the lock: a waiter sees what the holder applied.
        return [str(name) for name in runner(db, scripts, history_table).up(target)]


def pending_migrations(db: peewee.Database, scripts: str = QUEUE_MIGRATIONS,
                       history_table: str = HISTORY_TABLE) -> List[str]:
    """Names of the scripts not yet applied to ``db`` (all of them on an empty one)."""
    return [m.name for m in runner(db, scripts, history_table).status()
            if m.path is not None and not m.applied]


def check_schema(db: peewee.Database) -> None:
    """Raise :class:`SchemaNotReady` naming what is missing unless every caravel_lite
    migration has been applied to ``db``. Never changes the database."""
    pending = pending_migrations(db)
    if pending:
        raise SchemaNotReady(
            "caravel_lite schema is not ready: pending migrations " + ", ".join(pending)
            + " (run caravel_lite.migrate(db) or `python -m caravel_lite migrate`)",
            tuple(pending))
