"""Which slot of a schedule was enqueued last, read from the jobs table.

A schedule knows its own slots, so the lookup walks them backwards from now and asks
the unique dedup index (a digest of queue, tenant and key) which of them hold a job:
point lookups in batches, no new index and no table of scheduler state. The walk is
bounded: a schedule silent for longer than ``horizon`` slots reports no last slot.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import peewee

from caravel_lite.envelope import dedup_digest
from caravel_lite.schedules import Schedule, Slot
from caravel_lite.schema import JOBS_TABLE

BATCH = 100
HORIZON = 1000


@dataclass(frozen=True)
class LastSlot:
    slot: Slot
    job_id: str
    state: str


def last_enqueued(db: peewee.Database, schedule: Schedule, now_us: int,
                  horizon: int = HORIZON) -> Optional[LastSlot]:
    """The newest of the schedule's last ``horizon`` slots (up to now) that holds a job
    in the queue, whatever the job's state; None if none does."""
    # Walked lazily, a batch at a time: a schedule that ran lately is found in the first
    # batch, without computing the rest of its horizon (cron occurrences cost the most).
    slots = schedule.timing.backwards(schedule.name, now_us)
    for start in range(0, horizon, BATCH):
        part = list(itertools.islice(slots, min(BATCH, horizon - start)))
        if not part:
            break
        digests = {dedup_digest(schedule.queue_name, schedule.tenant_id, slot.key): slot
                   for slot in part}
        marks = ", ".join([db.param] * len(digests))
        rows = db.execute_sql(
            f"SELECT dedup_key, id, state FROM {JOBS_TABLE} WHERE dedup_key IN ({marks})",
            list(digests)).fetchall()
        if rows:
            found = {digest: (job_id, state) for digest, job_id, state in rows}
            for digest, slot in digests.items():  # newest first
                if digest in found:
                    job_id, state = found[digest]
                    return LastSlot(slot, job_id, state)
    return None
