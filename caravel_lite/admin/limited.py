"""Limited keys for the operators: per queue and concurrency key, the jobs leased now
and the jobs waiting (pending) behind the key's limit (caravel_lite.limits)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import peewee

from caravel_lite.dialect import Dialect
from caravel_lite.schema import FLOW_INDEX, JOBS_TABLE
from caravel_lite.statements import LEASED, PENDING


@dataclass(frozen=True)
class LimitedKey:
    queue_name: str
    key: str
    leased: int
    waiting: int


def limited_keys_statement(db: peewee.Database, dialect: Dialect,
                           queue: Optional[str] = None) -> Tuple[str, Tuple[str, ...]]:
    """The statement :func:`limited_keys` runs and its parameters: through the flow
    index, filtering the pending and leased jobs on the state column that index keys
    on (``Dialect.flow_state``); filtering ``state`` instead, MariaDB would seek the
    index by queue only and read every grouped job the queue ever held."""
    p = db.param
    table_via, state_column = dialect.table_via(JOBS_TABLE, FLOW_INDEX.name), dialect.flow_state
    where = f" AND queue = {p}" if queue is not None else ""
    sql = (f"SELECT queue, concurrency_key, "
           f"SUM(CASE WHEN state = '{LEASED}' THEN 1 ELSE 0 END), "
           f"SUM(CASE WHEN state = '{PENDING}' THEN 1 ELSE 0 END) FROM {table_via} "
           f"WHERE flow_group IS NOT NULL AND concurrency_key IS NOT NULL "
           f"AND {state_column} IN ('{PENDING}', '{LEASED}'){where} "
           f"GROUP BY queue, concurrency_key")
    return sql, ((queue,) if queue is not None else ())


def limited_keys(db: peewee.Database, dialect: Dialect,
                 queue: Optional[str] = None) -> Tuple[LimitedKey, ...]:
    """Keys with jobs waiting, most waiting first. Reads the pending and leased jobs of
    gated queues only (through the flow index, which holds no other rows where it can
    be partial and keys them by state elsewhere), never a payload."""
    rows = db.execute_sql(*limited_keys_statement(db, dialect, queue)).fetchall()
    keys = [LimitedKey(q, k, int(leased), int(waiting)) for q, k, leased, waiting in rows
            if int(waiting)]
    return tuple(sorted(keys, key=lambda k: (-k.waiting, k.queue_name, k.key)))


__all__ = ["LimitedKey", "limited_keys", "limited_keys_statement"]
