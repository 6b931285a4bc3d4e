"""A job outside any chain or batch costs what it did before workflows existed: the
same statements, one by one, on enqueue, claim and complete (single and batched),
whatever workflows the database holds. Statements are counted, not timed (the
numbers are those of the code before issue #26, measured on each database)."""
from __future__ import annotations

from typing import Any, Callable, Dict, List

from caravel_lite import Dispatch
from tests.workflows.jobs import QUEUE, TENANT, Step, make_queue, to

# Statements per operation for one plain job (three for the *_many rows), by backend.
EXPECTED: Dict[str, Dict[str, List[str]]] = {
    "sqlite": {"enqueue": ["INSERT"], "enqueue_many": ["INSERT"], "claim": ["WITH"],
               "complete": ["UPDATE"], "claim_many": ["WITH"], "complete_many": ["UPDATE"]},
    "postgres": {"enqueue": ["INSERT"], "enqueue_many": [], "claim": ["WITH"],
                 "complete": ["UPDATE"], "claim_many": ["WITH"],
                 "complete_many": ["UPDATE"]},
    # (MariaDB's server statement limit is read once per queue, here by the batch.)
    "mysql": {"enqueue": ["INSERT"], "enqueue_many": ["INSERT"],
              "claim": ["SELECT", "SELECT", "UPDATE"], "complete": ["UPDATE"],
              "claim_many": ["SELECT", "SELECT", "UPDATE"], "complete_many": ["UPDATE"]},
}


def _recording(db: Any, seen: List[str]) -> Callable[[], None]:
    original = db.execute_sql

    def execute_sql(sql, params=None, *args, **kwargs):
        seen.append(sql)
        return original(sql, params, *args, **kwargs)

    db.execute_sql = execute_sql

    def undo() -> None:
        db.execute_sql = original
    return undo


def test_a_plain_job_runs_the_statements_it_ran_before_workflows(db, backend):
    queue = make_queue(db)
    # Workflows in the database, some of them due and some held, change nothing.
    queue.enqueue_chain([(Step("c1"), to(queue="other")), (Step("c2"), to(queue="other"))])
    queue.enqueue_batch([(Step("b1"), to(queue="other"))],
                        on_complete=(Step("cb"), to(queue="other")))
    plain = Dispatch(queue=QUEUE, tenant_id=TENANT)
    held: Dict[str, Any] = {}
    steps = [
        ("enqueue", lambda: queue.enqueue(Step("p"), plain)),
        ("enqueue_many", lambda: queue.enqueue_many([(Step(f"p{n}"), plain)
                                                     for n in range(3)])),
        ("claim", lambda: held.__setitem__("one", queue.claim(QUEUE))),
        ("complete", lambda: queue.complete(held["one"])),
        ("claim_many", lambda: held.__setitem__("many", queue.claim_many(QUEUE, 3))),
        ("complete_many", lambda: queue.complete_many(held["many"])),
    ]
    seen: List[str] = []
    undo = _recording(db, seen)
    try:
        for name, step in steps:
            seen.clear()
            step()
            assert [sql.split(None, 1)[0] for sql in seen] == EXPECTED[backend][name], name
            assert not any("workflow" in sql or "held" in sql for sql in seen), name
            if name == "enqueue":
                assert seen == [queue._sql.insert]
            if name == "complete":
                assert seen == [queue._sql.complete]
    finally:
        undo()
    assert held["one"] is not None and len(held["many"]) == 3
