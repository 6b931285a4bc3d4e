"""The exceptions caravel_lite raises on purpose.

Every error a caller can act on derives from :class:`CaravelError`. Input errors are
also ``ValueError`` (and an unknown job type also ``LookupError``) so that code written
against the built-in hierarchy keeps working.
"""
from __future__ import annotations

import peewee


class CaravelError(Exception):
    """Base class of every error raised deliberately by caravel_lite."""


class InvalidField(CaravelError, ValueError):
    """An argument failed validation; nothing was written.

    ``field`` names the offending argument or option (``"tenant_id"``, ``"queue"``,
    ``"payload"``, ``"lease_duration"`` ...).
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class UnknownJobType(CaravelError, LookupError):
    """The job type or wire name is not registered in this process's registry."""


class QueueIdempotencyConflict(CaravelError):
    """The idempotency key is already used by a job with another type or payload.

    An HTTP API would map this to 409 Conflict. The existing job is unchanged.
    """

    def __init__(self, message: str, existing_id: object = None) -> None:
        super().__init__(message)
        self.existing_id = existing_id


class SchemaNotReady(CaravelError):
    """The database lacks caravel_lite's tables or has migrations still pending."""

    def __init__(self, message: str, pending: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.pending = pending


class SchemaLockTimeout(SchemaNotReady):
    """``migrate`` waited longer than its ``lock_timeout`` for another process's
    migration to finish; nothing was applied by this call."""


class OutsideTransaction(CaravelError):
    """An operation that must join the caller's transaction ran outside one."""


class LeaseLost(CaravelError):
    """Raised at the end of a handler's ``with ctx.transaction():`` block when the job's
    lease was no longer owned (expired, or taken over by another worker): the block's
    writes were rolled back and the worker writes nothing more for the attempt."""


class DatabaseBusy(CaravelError, peewee.OperationalError):
    """A lock conflict outlasted the retry budget of the call (SQLite stayed locked by
    another writer, or a server's deadlock or lock wait kept recurring):
    :mod:`caravel_lite.retry`.

    The message says whether the statement can simply be repeated (it ran outside a
    transaction and changed nothing) or the caller's transaction must be repeated.
    Still a ``peewee.OperationalError``, so existing handlers of that keep working.
    Never itself treated as a transient error: its budget is already spent.
    """


class StatementTooLarge(CaravelError):
    """A statement would exceed, or did exceed, the most the database server accepts in
    one statement (MariaDB/MySQL ``max_allowed_packet``); nothing was written.

    ``limit`` is the server's limit in bytes, ``size`` the statement's (or one row's)
    estimated size as sent.
    """

    def __init__(self, message: str, limit: int = 0, size: int = 0) -> None:
        super().__init__(message)
        self.limit = limit
        self.size = size
