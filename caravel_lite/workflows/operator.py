"""A batch member ended without its lease (an operator's or the application's cancel
or discard of a PENDING job, one or many): the ending UPDATE, fenced on the job's
state, and the batch's count in one transaction, as a worker's transition carries
them."""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

import peewee

from caravel_lite.retry import recovering, retrying
from caravel_lite.schema import JOBS_TABLE
from caravel_lite.workflows.follow import FollowUps
from caravel_lite.workflows.membership import MARKED, membership_of

__all__ = ["end_member", "end_marked"]


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


def end_marked(db: peewee.Database, dialect: Any, ids: Sequence[str], sql: str,
               params_of: Callable[[str], List[Any]], state: str, now_ms: int) -> int:
    """After a bulk UPDATE that left out the jobs of a workflow
    (:data:`~caravel_lite.workflows.membership.UNMARKED`) changed fewer than ``ids``:
    end those of them that belong to one, each by ``sql`` (the bulk statement for one
    id, which checks the state and every filter again; ``params_of(id)`` its
    parameters), a batch member with its batch's count (:func:`end_member`), a chain
    step or callback as the plain job it then is. How many it ended. One read of the
    marked jobs among ``ids``, run only when the bulk statement missed some."""
    marks = ", ".join([db.param] * len(ids))
    rows = db.execute_sql(f"SELECT id, job_options FROM {JOBS_TABLE} WHERE id IN ({marks}) "
                          f"AND job_options LIKE {db.param}", [*ids, MARKED]).fetchall()
    ended = 0
    for ident, options in sorted(rows):
        params = params_of(str(ident))
        done = end_member(db, dialect, options, str(ident), sql, params, state, now_ms)
        if done is None:
            done = retrying(dialect, db,
                            lambda: int(db.execute_sql(sql, params).rowcount)) == 1
        ended += int(done)
    return ended
