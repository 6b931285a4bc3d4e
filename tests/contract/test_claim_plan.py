"""Claim cost does not grow with history (SPEC §2): the claim's candidate query is
driven by the (queue, state, priority, available_at, ...) index, so completed rows are
never read; so is the poll waiter's read of whether a pending job is due, so the
queue's delayed jobs are not read either."""
from __future__ import annotations

import uuid

from caravel_lite.queue import CANDIDATES
from caravel_lite.statements import INSERT_COLUMNS, Statements
from caravel_lite.worker.waiter import PollWaiter
from tests.contract.explain import ANALYZE, PLANS
from tests.contract.jobs import QUEUE, Ping, dispatch, make_queue

HISTORY = 4000
BATCH = 250


def _claim_index(db) -> str:
    for name_and_columns in db.get_indexes("caravel_jobs"):
        if list(name_and_columns.columns[:4]) == ["queue", "state", "priority", "available_at"]:
            return name_and_columns.name
    raise AssertionError("no (queue, state, priority, available_at) index")


def _load_history(db, now_ms: int) -> None:
    """In bulk: completed history on this queue and others, and the backlog a busy
    database has besides (pending jobs of other queues, delayed jobs of this one)."""
    def row(i: int) -> list:
        queue, state, due = QUEUE, "completed", now_ms - HISTORY + i
        if i % 4 == 0:
            queue = f"other-{i % 3}"
            if i % 8 == 0:
                state = "pending"  # other queues' backlog
        elif i % 10 == 1:
            state, due = "pending", now_ms + 60_000 + i  # delayed, this queue
        return [str(uuid.uuid4()), queue, "tenant-a", None, None, "contract.ping.v1",
                '{"n":1}', 2, due, 3, state, now_ms - HISTORY + i, 1, 0, 0, now_ms]

    _insert_rows(db, row)


def _insert_rows(db, row) -> None:
    """HISTORY jobs, row(i) giving job i's INSERT_COLUMNS values, in multi-row INSERTs."""
    values = ", ".join(["(" + ", ".join([db.param] * len(INSERT_COLUMNS)) + ")"] * BATCH)
    sql = f"INSERT INTO caravel_jobs ({', '.join(INSERT_COLUMNS)}) VALUES {values}"
    with db.atomic():
        for start in range(0, HISTORY, BATCH):
            db.execute_sql(sql, [value for i in range(start, start + BATCH)
                                 for value in row(i)])


def test_claim_candidates_use_the_claim_index(db, backend):
    queue = make_queue(db)
    for i in range(5):
        queue.enqueue(Ping(i), dispatch())
    now_ms = queue._now_ms()
    _load_history(db, now_ms)
    db.execute_sql(ANALYZE[backend])
    sql = Statements.build(db, CANDIDATES).candidates
    plan = PLANS[backend](db, sql, (QUEUE, now_ms))
    assert plan.index == _claim_index(db), plan.text
    assert not plan.full_scan, plan.text
    assert not plan.sorts, plan.text
    # and the claim still takes the pending jobs, in order, past all that history
    claimed = [queue.claim(QUEUE) for _ in range(6)]
    assert [lease is not None for lease in claimed] == [True] * 5 + [False]


def _load_delayed(db, now_ms: int) -> None:
    """In bulk: a queue holding only delayed jobs, due a minute and more from now."""
    _insert_rows(db, lambda i: [str(uuid.uuid4()), QUEUE, "tenant-a", None, None,
                                "contract.ping.v1", '{"n":1}', i % 4, now_ms + 60_000 + i,
                                3, "pending", now_ms, 1, 0, 0, now_ms])


def test_the_poll_reads_due_pending_jobs_through_the_claim_index(db, backend):
    """The poll probe's pending EXISTS ranges over (queue, state, priority,
    available_at), bounded by the due time, not over (queue, state) only (the lease or
    the listing index), which reads every delayed job of the queue on each probe."""
    queue = make_queue(db)
    now_ms = queue._now_ms()
    _load_delayed(db, now_ms)
    db.execute_sql(ANALYZE[backend])
    waiter = PollWaiter(queue, QUEUE)
    pending_exists = waiter.due_now_sql.split(", EXISTS", 1)[0]
    plan = PLANS[backend](db, pending_exists, (QUEUE, now_ms))
    assert plan.indexes == (_claim_index(db),), plan.text
    assert not plan.full_scan, plan.text
    assert waiter._confirmed() is False  # the delayed jobs are not due
    queue.enqueue(Ping(1), dispatch())
    assert waiter._confirmed() is True
