"""Limited keys for the operators: per queue and concurrency key, the jobs leased now
and the jobs waiting (pending) behind the key's limit (caravel_lite.limits)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import peewee

from caravel_lite.schema import FLOW_INDEX, JOBS_TABLE
from caravel_lite.statements import LEASED, PENDING


@dataclass(frozen=True)
class LimitedKey:
    queue_name: str
    key: str
    leased: int
    waiting: int


def limited_keys(db: peewee.Database, table_via: str,
                 queue: Optional[str] = None) -> Tuple[LimitedKey, ...]:
    """Keys with jobs waiting, most waiting first. Reads the pending and leased jobs of
    gated queues only (the flow index holds no other rows where it can be partial),
    never a payload."""
    p = db.param
    where = f" AND queue = {p}" if queue is not None else ""
    rows = db.execute_sql(
        f"SELECT queue, concurrency_key, "
        f"SUM(CASE WHEN state = '{LEASED}' THEN 1 ELSE 0 END), "
        f"SUM(CASE WHEN state = '{PENDING}' THEN 1 ELSE 0 END) FROM {table_via} "
        f"WHERE flow_group IS NOT NULL AND concurrency_key IS NOT NULL "
        f"AND state IN ('{PENDING}', '{LEASED}'){where} GROUP BY queue, concurrency_key",
        (queue,) if queue is not None else ()).fetchall()
    keys = [LimitedKey(q, k, int(leased), int(waiting)) for q, k, leased, waiting in rows
            if int(waiting)]
    return tuple(sorted(keys, key=lambda k: (-k.waiting, k.queue_name, k.key)))


__all__ = ["LimitedKey", "limited_keys"]
