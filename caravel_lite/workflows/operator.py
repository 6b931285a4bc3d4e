"""A batch member ended without its lease (an operator's or the application's cancel
or discard of a PENDING job): the ending UPDATE, fenced on the job's state, and the
batch's count in one transaction, as a worker's transition carries them."""
from __future__ import annotations

from typing import Any, Optional, Sequence

import peewee

from caravel_lite.retry import recovering
from caravel_lite.workflows.follow import FollowUps
from caravel_lite.workflows.membership import membership_of

__all__ = ["end_member"]


def end_member(db: peewee.Database, dialect: Any, options: Optional[str], job_id: str,
               sql: str, params: Sequence[Any], state: str,
               now_ms: int) -> Optional[bool]:
    """None when the job's options name no batch membership (the caller's plain path
    applies); else whether ``sql`` moved the job to ``state``, counted in its batch in
    the same transaction. False also after a lost reply whose transaction committed
    (the repeat matches nothing): the caller's plain path then reads the row."""
    member = membership_of(options)
    followups = FollowUps(db)
    if member is None or not followups.applies(member, state):
        return None

    def once() -> bool:
        with dialect.write_transaction(db):
            if db.execute_sql(sql, params).rowcount != 1:
                return False
            followups.after(member, job_id, state, now_ms)
        return True

    return recovering(dialect, db, once, once)
