"""Which jobs an operator view means: the filters of ``QueueAdmin.jobs`` and of the
bulk actions, validated before any SQL runs, and the SQL that reads them newest first.

Newest first is by id: ids begin with their creation millisecond (caravel_lite.ids),
so an id is also the keyset cursor, and ``since``/``until`` select by creation time as
a range of ids. Every read follows an index in its order and stops at the page's end
(named in the statement where the dialect takes an index hint):

- a tenant: ``(tenant_id, state, id)``, one state at a time, merged;
- a queue: ``(queue, state, id)``, one state at a time, merged;
- a state alone: ``(queue, state, id)`` for each queue in use, merged;
- nothing: the primary key.

Where indexes can be partial the two listing indexes leave pending jobs out (an
enqueue writes no entry in them, migration 0007): pending jobs are read by queue
through the claim index, led by (queue, state) too, and sorted, so a page of pending
jobs costs in proportion to that queue's pending jobs (a tenant's: for each queue in
use), never to the history.
The other filters are checked on the rows as they are read.
"""
from __future__ import annotations

import heapq
import re
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

import peewee

from caravel_lite import validation
from caravel_lite.clock import duration_micros, floor_ms, to_micros
from caravel_lite.errors import InvalidField
from caravel_lite.dialect import dialect_of
from caravel_lite.schema import JOBS_TABLE, IndexSpec, listing_index
from caravel_lite.values import Failure, JobState

Instant = Union[datetime, timedelta]
MAX_LIMIT = 1000


def _enum(field: str, cls: type, value: object) -> Any:
    if value is None or isinstance(value, cls):
        return value
    if isinstance(value, str):
        try:
            return cls(value.lower())
        except ValueError:
            pass
    names = ", ".join(member.value for member in cls)  # type: ignore[attr-defined]
    raise InvalidField(field, f"must be one of {names}, got {value!r}")


def instant_ms(field: str, value: Optional[Instant], now_us: int) -> Optional[int]:
    """An aware datetime, or a timedelta meaning that long before now, as epoch ms."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise InvalidField(field, "must not be negative")
        return floor_ms(now_us - duration_micros(value))
    if isinstance(value, datetime):
        try:
            return floor_ms(to_micros(value))
        except ValueError:
            raise InvalidField(field, "must be timezone-aware") from None
    raise InvalidField(field, f"must be a datetime or a timedelta, got {type(value).__name__}")


def id_prefix(ms: int) -> str:
    """The text every id created in millisecond ``ms`` starts with (or sorts after):
    ids are stored as lower-case canonical UUID text whose first 12 hex digits are the
    millisecond, so text order is creation order."""
    digits = f"{max(ms, 0) & ((1 << 48) - 1):012x}"
    return f"{digits[:8]}-{digits[8:]}"


def id_time_ms(job_id: str) -> int:
    """The creation millisecond at the start of an id."""
    return int(job_id[:8] + job_id[9:13], 16)


@dataclass(frozen=True)
class JobFilter:
    """Validated filters; ``since_ms``/``until_ms`` bound the creation millisecond
    (since inclusive, until exclusive)."""

    queue: Optional[str] = None
    state: Optional[JobState] = None
    tenant_id: Optional[str] = None
    wire_name: Optional[str] = None
    failure: Optional[Failure] = None
    since_ms: Optional[int] = None
    until_ms: Optional[int] = None

    @classmethod
    def build(cls, now_us: int, queue: Optional[str] = None, state: object = None,
              tenant_id: Optional[str] = None, wire_name: Optional[str] = None,
              failure: object = None, since: Optional[Instant] = None,
              until: Optional[Instant] = None) -> "JobFilter":
        if queue is not None:
            validation.check_queue(queue)
        if tenant_id is not None:
            validation.check_identity("tenant_id", tenant_id)
        if wire_name is not None:
            validation.check_wire_name(wire_name)
        return cls(queue, _enum("state", JobState, state), tenant_id, wire_name,
                   _enum("failure", Failure, failure), instant_ms("since", since, now_us),
                   instant_ms("until", until, now_us))

    def with_state(self, state: JobState) -> "JobFilter":
        return JobFilter(self.queue, state, self.tenant_id, self.wire_name, self.failure,
                         self.since_ms, self.until_ms)


def check_cursor(after: Optional[str]) -> Optional[str]:
    if after is None:
        return None
    if not isinstance(after, str):
        raise InvalidField("after", "must be the cursor a previous page returned")
    try:
        return str(uuid.UUID(after))
    except ValueError:
        raise InvalidField("after", "must be the cursor a previous page returned") from None


_NAME_LITERAL = re.compile(r"[a-z0-9._-]+\Z")


def name_literal(value: str) -> str:
    """A queue name, wire name, state or failure category as an SQL literal. These
    are written into the statement rather than bound: a driver that prepares a
    statement run often (psycopg 3 after five runs) lets PostgreSQL switch to one
    generic plan for every parameter value, which cannot tell a rare queue or state
    from a common one and may walk the whole primary key for it. Their characters are
    validated (``[a-z0-9._-]``), so they cannot close the quotes."""
    if not _NAME_LITERAL.match(value):
        raise ValueError(f"not a name: {value!r}")
    return f"'{value}'"


def _where(p: str, f: JobFilter, after: Optional[str]) -> Tuple[str, List[Any]]:
    clauses: List[str] = []
    params: List[Any] = []
    if f.tenant_id is not None:  # any text: always bound
        clauses.append(f"tenant_id = {p}")
        params.append(f.tenant_id)
    for column, value in (("queue", f.queue),
                          ("state", f.state.value if f.state else None),
                          ("wire_name", f.wire_name),
                          ("last_failure", f.failure.value if f.failure else None)):
        if value is not None:
            clauses.append(f"{column} = {name_literal(value)}")
    if f.since_ms is not None:
        clauses.append(f"id >= {p}")
        params.append(id_prefix(f.since_ms))
    if f.until_ms is not None:
        clauses.append(f"id < {p}")
        params.append(id_prefix(f.until_ms))
    if after is not None:
        clauses.append(f"id < {p}")
        params.append(after)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def recheck(p: str, f: JobFilter) -> Tuple[str, List[Any]]:
    """``f`` as conditions on a row (without ``WHERE``) and their parameters, for the
    statement of a bulk action to check again what the listing read: a job whose state
    or last failure changed since it was listed no longer matches."""
    where, params = _where(p, f, None)
    return where[len(" WHERE "):] or "1 = 1", params


def queue_names(db: peewee.Database) -> List[str]:
    """Names of the queues holding at least one job, sorted: one index seek per queue
    (a loose scan of an index led by ``queue``), never a scan of the jobs."""
    sql = f"SELECT MIN(queue) FROM {JOBS_TABLE} WHERE queue > {db.param}"
    names: List[str] = []
    last = ""
    while True:
        (name,) = db.execute_sql(sql, (last,)).fetchone()
        if name is None:
            return names
        names.append(name)
        last = name


def _plans(db: peewee.Database, f: JobFilter) -> List[JobFilter]:
    """The filters to read one by one, each led by an index's columns."""
    if f.state is not None:
        states = [f.state]
    elif f.failure is not None:
        # A completion clears the last failure: only these states can have one.
        states = [JobState.PENDING, JobState.LEASED, JobState.DEAD_LETTER,
                  JobState.CANCELLED]
    else:
        states = list(JobState)
    if f.tenant_id is not None or f.queue is not None:
        plans = [f.with_state(state) for state in states]
    elif f.state is not None:
        plans = [f]
    else:
        return [f]
    dialect = dialect_of(db)
    out: List[JobFilter] = []
    for part in plans:
        assert part.state is not None
        if part.queue is None and (part.tenant_id is None or listing_index(
                dialect, part.state.value, by_tenant=True) is None):
            # No index leads with what is left (a state alone; a tenant's pending jobs
            # where the listings leave them out): one read per queue in use.
            out += [replace(part, queue=name) for name in queue_names(db)]
        else:
            out.append(part)
    return out


def _index_of(db: peewee.Database, part: JobFilter) -> Optional[IndexSpec]:
    """The index one planned read follows (None: the primary key)."""
    if part.state is None:
        return None
    dialect = dialect_of(db)
    spec = None
    if part.tenant_id is not None:
        spec = listing_index(dialect, part.state.value, by_tenant=True)
    if spec is None and part.queue is not None:
        spec = listing_index(dialect, part.state.value, by_tenant=False)
    return spec


def read_newest(db: peewee.Database, columns: str, f: JobFilter, after: Optional[str],
                limit: int) -> List[Sequence[Any]]:
    """Up to ``limit`` rows (``columns``, the first of which is ``id``) matching ``f``,
    newest first, all older than ``after`` when given."""
    reads = []
    dialect = dialect_of(db)
    for part in _plans(db, f):
        where, params = _where(db.param, part, after)
        table = JOBS_TABLE
        spec = _index_of(db, part)
        if spec is not None:
            table = dialect.table_via(JOBS_TABLE, spec.name)
            if spec.where is not None:  # word for word: see listing_index
                where += f" AND {spec.where}"
        sql = f"SELECT {columns} FROM {table}{where} ORDER BY id DESC LIMIT {int(limit)}"
        reads.append(list(db.execute_sql(sql, params).fetchall()))
    if len(reads) == 1:
        return reads[0]
    merged = heapq.merge(*reads, key=lambda row: row[0], reverse=True)
    return [row for _, row in zip(range(limit), merged)]


def matching_rows(db: peewee.Database, f: JobFilter, batch: int
                  ) -> Iterator[List[Sequence[Any]]]:
    """(id, queue) of every job matching ``f``, newest first, in lists of at most
    ``batch``; each list is read after the previous one was handed out (keyset, so
    rows changed meanwhile are neither read twice nor skipped)."""
    after: Optional[str] = None
    while True:
        rows = read_newest(db, "id, queue", f, after, batch)
        if not rows:
            return
        yield rows
        if len(rows) < batch:
            return
        after = rows[-1][0]


def page_limit(limit: object) -> int:
    return validation.check_int("limit", limit, 1, MAX_LIMIT)
