"""A lease operation's one fenced write, and how it recovers a lost reply: by reading
back the row it wrote, never by trusting a repeat's row count (a repeat after a
committed first run matches nothing and would answer "not owned")."""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import peewee

from caravel_lite.clock import floor_ms
from caravel_lite.retry import recovering
from caravel_lite.values import QueueLease

__all__ = ["Wrote", "fenced_write", "left_as", "claimed_by"]

#: whether a job's row (state, lease_token, lease_expires_at, updated_at, claimed_at,
#: attempts, last_failure) holds what one call wrote
Wrote = Callable[[Sequence[Any]], bool]


def fenced_write(dialect: Any, db: peewee.Database, sql: str, params: Sequence[Any],
                 settled_sql: str, job_id: Optional[str] = None,
                 wrote: Optional[Wrote] = None,
                 then: Optional[Callable[[], None]] = None) -> int:
    """Run a conditional UPDATE of one job's row fenced by its lease, retrying lock
    conflicts; returns rows matched (0 or 1).

    When the reply is lost, the row is read back on a new connection (``settled_sql``,
    one parameter: ``job_id``): ``wrote(row)`` says whether it holds what this call
    wrote, and then the answer is 1; otherwise the statement is sent again, which the
    fence makes harmless (it matches nothing unless the lease is still owned, and then
    the first run did not commit). Without ``wrote`` the statement is just sent again.
    ``then``: what must commit with the write when it matched (in one transaction)."""
    def run() -> int:
        if then is not None:
            # A chain's or batch's job (caravel_lite.workflows): its follow-up commits
            # with the transition or not at all, so a lost reply's read-back of the
            # row tells about both.
            with dialect.write_transaction(db):
                matched = int(db.execute_sql(sql, params).rowcount)
                if matched == 1:
                    then()
            return matched
        return int(db.execute_sql(sql, params).rowcount)

    def recover() -> int:
        if wrote is None:
            return run()
        row = db.execute_sql(settled_sql, (job_id,)).fetchone()
        return 1 if row is not None and wrote(row) else run()

    return recovering(dialect, db, run, recover, statement=then is None)


def left_as(state: str, now_ms: int, lease: QueueLease, attempts: int,
            last_failure: Optional[str] = None) -> Wrote:
    """``wrote`` for an operation that ends ``lease``: the row in ``state``, its lease
    cleared, last written at this call's ``now_ms``, still as ``lease``'s claim left it
    (claimed then, ``attempts`` after this call's write) and, given ``last_failure``,
    with that failure. The time alone is not enough: in the same millisecond the sweep
    may have made the row pending again, or the lease's next holder completed it."""
    return lambda row: (row[0] == state and row[1] is None and int(row[3]) == now_ms
                        and claimed_by(lease, row[4], row[5], attempts)
                        and (last_failure is None or row[6] == last_failure))


def claimed_by(lease: QueueLease, claimed_at: Any, attempts: Any, expected: int) -> bool:
    """Whether a row's ``claimed_at`` and ``attempts`` are those ``lease``'s claim left
    (``expected`` attempts): no claim took the row since."""
    return (claimed_at is not None and int(claimed_at) == floor_ms(lease._claimed_at_us)
            and int(attempts) == expected)
