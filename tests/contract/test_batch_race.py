"""enqueue_many against a concurrent writer of the same idempotency key.

On PostgreSQL and MariaDB two transactions can both read that a key is free; the
batch's write (COPY on PostgreSQL, multi-row INSERT on MariaDB) then waits on the
other's uncommitted key and fails once it commits. The batch must be redone whole and
answer the winner's id. (SQLite writers take the write lock before reading, so the
race cannot arise there.)"""
from __future__ import annotations

import threading
from typing import Any, Dict

import pytest

from caravel_lite import EnqueueResult
from tests.contract import procs
from tests.contract.jobs import QUEUE, Ping, dispatch, make_queue, row_count
from tests.support import wait_for

# How many sessions of this database wait on a row or key lock. (MariaDB refreshes
# innodb_trx only when it was last read over 0.1 s ago, hence the slower polling below.)
LOCK_WAITS = {
    "postgres": "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'",
    "mysql": "SELECT count(*) FROM information_schema.innodb_trx "
             "WHERE trx_state = 'LOCK WAIT'",
}


@pytest.mark.backends("postgres", "mysql")
def test_a_batch_that_loses_a_key_race_is_redone_and_answers_the_winner(db, connect, backend):
    winner = make_queue(connect())
    observer = connect()
    outcome: Dict[str, Any] = {}

    def batch() -> None:
        loser = make_queue(connect())
        try:
            outcome["results"] = loser.enqueue_many(
                [(Ping(0), dispatch()), (Ping(1), dispatch("raced")), (Ping(2), dispatch())])
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    with winner.db.atomic():
        won = winner.enqueue(Ping(1), dispatch("raced"))
        thread = threading.Thread(target=batch)
        thread.start()
        wait_for(lambda: observer.execute_sql(LOCK_WAITS[backend]).fetchone()[0] >= 1,
                 timeout=procs.TIMEOUT, interval=0.25,
                 message="the batch to wait on the uncommitted key")
    thread.join(procs.TIMEOUT)
    assert not thread.is_alive()
    assert "error" not in outcome, outcome.get("error")
    results = outcome["results"]
    assert results[1] == EnqueueResult(won.job_id, True)
    assert [r.already_enqueued for r in results] == [False, True, False]
    assert row_count(db) == 3
    queue = make_queue(db)
    claimed = {queue.claim(QUEUE).job_id for _ in range(3)}
    assert claimed == {results[0].job_id, won.job_id, results[2].job_id}
