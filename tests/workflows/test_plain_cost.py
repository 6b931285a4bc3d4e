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


# The operator's and the application's actions on plain jobs, statement by statement
# (first words), as measured before workflow members were counted by them. Each runs
# on jobs of its own: "pending" ones waiting, "leased" ones claimed, "finished" ones
# completed (and, for the prunes, older than the cut-off). The same on every backend.
# (A prune reads each state it prunes: completed, then dead_letter and cancelled, the
# application's prune completed and dead_letter.)
OPERATOR_EXPECTED: Dict[str, List[str]] = {
    "discard": ["SELECT", "UPDATE"], "discard_many": ["SELECT", "UPDATE"],
    "cancel": ["SELECT", "UPDATE"], "cancel_many_pending": ["SELECT", "UPDATE"],
    "cancel_many_leased": ["SELECT", "UPDATE"], "queue_cancel": ["SELECT", "UPDATE"],
    "delete": ["DELETE", "DELETE"], "delete_pending": ["DELETE", "DELETE"],
    "delete_many": ["SELECT", "DELETE", "DELETE"], "queue_delete": ["DELETE", "DELETE"],
    "prune": ["SELECT", "DELETE", "DELETE", "SELECT", "SELECT"],
    "queue_prune": ["SELECT", "DELETE", "DELETE", "SELECT"],
}


def _operator_steps(db: Any) -> List[Any]:
    from datetime import timedelta

    from caravel_lite import QueueAdmin
    from caravel_lite.testing import ManualClock

    clock = ManualClock()
    queue = make_queue(db, clock=clock)
    admin = QueueAdmin(db, clock=clock)
    plain = Dispatch(queue=QUEUE, tenant_id=TENANT)

    def pending(n: int = 1) -> List[Any]:
        return [queue.enqueue(Step(f"p{k}"), plain).job_id for k in range(n)]

    def finished(n: int = 1) -> List[Any]:
        pending(n)
        leases = queue.claim_many(QUEUE, n)
        queue.complete_many(leases)
        clock.advance(timedelta(hours=2))  # older than the prunes' cut-off
        return [lease.job_id for lease in leases]

    def leased() -> Any:
        pending()
        return queue.claim(QUEUE)

    # (name, setup returning what the action needs, the action)
    return [
        ("discard", pending, lambda ids: admin.discard(ids[0])),
        ("discard_many", lambda: pending(3), lambda ids: admin.discard_many(queue=QUEUE)),
        ("cancel", pending, lambda ids: admin.cancel(ids[0])),
        ("cancel_many_pending", lambda: pending(3),
         lambda ids: admin.cancel_many(queue=QUEUE, state="pending")),
        ("cancel_many_leased", leased,
         lambda lease: admin.cancel_many(queue=QUEUE, state="leased")),
        ("queue_cancel", pending, lambda ids: queue.cancel(ids[0], QUEUE, TENANT)),
        ("delete", finished, lambda ids: admin.delete(ids[0])),
        ("delete_pending", pending, lambda ids: admin.delete(ids[0])),
        ("delete_many", lambda: finished(3),
         lambda ids: admin.delete_many(queue=QUEUE, state="completed")),
        ("queue_delete", finished, lambda ids: queue.delete(ids[0], QUEUE, TENANT)),
        ("prune", lambda: finished(3), lambda ids: admin.prune(timedelta(hours=1))),
        ("queue_prune", lambda: finished(3), lambda ids: queue.prune(timedelta(hours=1))),
    ]


def test_a_plain_jobs_operator_actions_run_the_statements_they_ran_before(db):
    queue = make_queue(db)
    # Unfinished workflows in another queue (none of them due to be pruned).
    queue.enqueue_chain([(Step("c1"), to(queue="other")), (Step("c2"), to(queue="other"))])
    queue.enqueue_batch([(Step("b1"), to(queue="other"))],
                        on_complete=(Step("cb"), to(queue="other")))
    seen: List[str] = []
    found: Dict[str, List[str]] = {}
    for name, setup, action in _operator_steps(db):
        given = setup()
        undo = _recording(db, seen)
        try:
            seen.clear()
            assert action(given), name
        finally:
            undo()
        found[name] = [sql.split(None, 1)[0] for sql in seen]
        assert not any("workflow" in sql or "held" in sql for sql in seen), name
        db.execute_sql(f"DELETE FROM caravel_jobs WHERE queue = {db.param}", (QUEUE,))
    assert found == OPERATOR_EXPECTED


def test_a_delete_that_deletes_nothing_reads_back_what_it_left_once(db):
    """The one statement more: a delete whose plain DELETE matched fewer rows than it
    was given reads those left back (one primary-key read, as a partly matched bulk
    delete did before), since a chain's or batch's jobs among them are deleted by
    another path. Before workflows, a delete that matched nothing read nothing."""
    from caravel_lite import QueueAdmin

    queue = make_queue(db)
    queue.enqueue(Step("running"), to())
    lease = queue.claim(QUEUE)
    unknown = "00000000-0000-4000-8000-000000000000"
    for ident in (lease.job_id, unknown):  # leased: kept; unknown: nothing to delete
        seen: List[str] = []
        undo = _recording(db, seen)
        try:
            assert not QueueAdmin(db).delete(ident)
        finally:
            undo()
        assert [sql.split(None, 1)[0] for sql in seen] == ["DELETE", "SELECT"], ident
        assert not any("workflow" in sql for sql in seen)
