"""The partial indexes of migration 0004 serve the queries they were made for: the
idempotency lookups (one key, or a batch's keys), the sweep of expired leases and
pruning each read their own partial index, not the whole table, on the databases that
have partial indexes (SQLite, PostgreSQL). MariaDB/MySQL keep 0001's full indexes."""
from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Callable, List, Tuple

import pytest

from caravel_lite.queue import CANDIDATES
from caravel_lite.statements import INSERT_COLUMNS, BatchStatements, Statements
from caravel_lite import QueueAdmin
from tests.contract.explain import ANALYZE, PLANS
from tests.contract.jobs import QUEUE, make_queue

pytestmark = pytest.mark.backends("sqlite", "postgres")

DEDUP_INDEX = "caravel_jobs_dedup_key"
LEASE_INDEX = "caravel_jobs_queue_state_lease_expires_at"
PRUNE_INDEX = "caravel_jobs_state_finished_at"

HISTORY = 4000
BATCH = 250
COLUMNS = INSERT_COLUMNS + ("lease_token", "lease_expires_at", "claimed_at", "finished_at")


def _key(i: int) -> str:
    return f"{i:064x}"


def _load(db, now_ms: int) -> None:
    """A busy database in bulk: mostly finished history (finished over the last
    HISTORY ms), pending and leased jobs on this queue and others, a few leases
    expired, one job in seven with an idempotency key."""
    values = ", ".join(["(" + ", ".join([db.param] * len(COLUMNS)) + ")"] * BATCH)
    sql = f"INSERT INTO caravel_jobs ({', '.join(COLUMNS)}) VALUES {values}"
    with db.atomic():
        for start in range(0, HISTORY, BATCH):
            params: List = []
            for i in range(start, start + BATCH):
                queue = f"other-{i % 3}" if i % 4 == 0 else QUEUE
                state, token, expires, claimed, finished = "completed", None, None, None, None
                if i % 10 == 1:
                    state = "pending"
                elif i % 10 == 2:
                    state, token, claimed = "leased", uuid.uuid4().hex, now_ms - 1000
                    expires = now_ms - 10 if i % 100 == 2 else now_ms + 30_000 + i
                else:
                    finished = now_ms - HISTORY + i
                params += [str(uuid.uuid4()), queue, "tenant-a", None,
                           _key(i) if i % 7 == 0 else None, "contract.ping.v1", '{"n":1}', 2,
                           now_ms - HISTORY + i, 3, state, now_ms - HISTORY + i, 1, 0, 0,
                           now_ms, token, expires, claimed, finished]
            db.execute_sql(sql, params)


@pytest.fixture
def loaded(db, backend):
    queue = make_queue(db)
    now_ms = queue._now_ms()
    _load(db, now_ms)
    db.execute_sql(ANALYZE[backend])
    return queue, now_ms


def _table_scans(plan) -> List[str]:
    """The plan's lines that read the jobs table whole (PostgreSQL, SQLite). Not
    Plan.full_scan, which counts SQLite's scan of a materialized CTE itself."""
    return [line for line in plan.text.splitlines()
            if "Seq Scan on caravel_jobs" in line
            or line.strip().startswith("SCAN caravel_jobs")]


def _predicate(db, backend, index: str) -> str:
    """The WHERE clause of ``index`` as the database stores it ("" when it has none)."""
    if backend == "sqlite":
        sql = "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?"
    else:
        sql = "SELECT indexdef FROM pg_indexes WHERE indexname = %s"
    (definition,) = db.execute_sql(sql, (index,)).fetchone()
    upper = definition.upper()
    return definition[upper.index(" WHERE ") + 7:] if " WHERE " in upper else ""


def _assert_reads_partial_index(db, backend, sql: str, params, index: str,
                                column: str) -> None:
    plan = PLANS[backend](db, sql, params)
    assert plan.index == index, plan.text
    assert not plan.full_scan, plan.text
    assert column in _predicate(db, backend, index), (index, plan.text)


def _statements_run_by(db, monkeypatch, action: Callable[[], object]) -> List[Tuple]:
    """(sql, params) of every statement ``action`` runs, in a transaction rolled back
    afterwards."""
    seen: List[Tuple] = []
    original = db.execute_sql

    def record(sql, params=None, *args, **kwargs):
        seen.append((sql, params))
        return original(sql, params, *args, **kwargs)

    with db.atomic() as transaction:
        monkeypatch.setattr(db, "execute_sql", record)
        try:
            action()
        finally:
            monkeypatch.undo()
        transaction.rollback()
    return seen


def test_idempotency_lookups_use_the_partial_dedup_index(db, backend, loaded):
    statements = Statements.build(db, CANDIDATES)
    _assert_reads_partial_index(db, backend, statements.existing_by_dedup, (_key(7),),
                                DEDUP_INDEX, "dedup_key")
    keys = (_key(14), _key(21), _key(22))
    batch = loaded[0]._batch.existing_by_dedup(len(keys))  # as the dialect lists keys
    _assert_reads_partial_index(db, backend, batch, keys, DEDUP_INDEX, "dedup_key")


def test_the_sweep_uses_the_partial_lease_index(db, backend, loaded):
    queue, now_ms = loaded
    statements = Statements.build(db, CANDIDATES)
    _assert_reads_partial_index(db, backend, statements.expired_exists, (QUEUE, now_ms),
                                LEASE_INDEX, "state")
    _assert_reads_partial_index(db, backend, statements.sweep_reclaimable,
                                (now_ms, QUEUE, now_ms), LEASE_INDEX, "state")
    _assert_reads_partial_index(db, backend, statements.sweep_exhausted,
                                (now_ms, now_ms, QUEUE, now_ms), LEASE_INDEX, "state")
    # and the sweep finds exactly the expired leases of this queue
    expected = sum(1 for i in range(2, HISTORY, 100) if i % 4 != 0)
    assert queue.reclaim_expired(QUEUE) == expected > 0


def _prune_statements(db, monkeypatch, queue, only) -> List[Tuple]:
    """The reads that choose each batch's ids and the DELETEs of the jobs table, of a
    prune in batches. The batches are small beside the rows that match, as they are
    on a large table (on a table this small, PostgreSQL's planner would otherwise
    rather read it whole than follow an index to the few dozen rows)."""
    # Older than HISTORY - 50 ms: the first few dozen finished rows only.
    older_than = timedelta(milliseconds=HISTORY - 50)
    admin = QueueAdmin(db, clock=queue.clock)
    statements = _statements_run_by(
        db, monkeypatch, lambda: admin.prune(older_than, queue=only, batch_size=10))
    reads = [(sql, params) for sql, params in statements
             if sql.startswith("SELECT id FROM caravel_jobs") and " WHERE state" in sql]
    deletes = [(sql, params) for sql, params in statements
               if sql.startswith("DELETE FROM caravel_jobs")]
    assert len(reads) >= 3 and len(deletes) >= 2, statements
    return reads, deletes


def _assert_prune_plans(db, backend, statements) -> None:
    reads, deletes = statements
    for sql, params in reads:
        _assert_reads_partial_index(db, backend, sql, params, PRUNE_INDEX, "finished_at")
    for sql, params in deletes:
        plan = PLANS[backend](db, sql, params)
        assert not plan.full_scan, plan.text  # by id


def test_prune_uses_the_partial_prune_index(db, backend, loaded, monkeypatch):
    queue, _ = loaded
    _assert_prune_plans(db, backend, _prune_statements(db, monkeypatch, queue, None))


def test_prune_of_one_queue_uses_the_partial_prune_index(db, backend, monkeypatch):
    """With planner statistics too. With sqlite_stat1 from an ANALYZE (or PRAGMA
    optimize), SQLite, having no histogram of finished_at (no STAT4), estimates
    ``queue = ? AND state = ?`` on the claim index as cheaper than the range on the
    prune index; the prune statements name the prune index (Dialect.index_hint)."""
    queue = make_queue(db)
    _load(db, queue._now_ms())
    db.execute_sql(ANALYZE[backend])
    _assert_prune_plans(db, backend, _prune_statements(db, monkeypatch, queue, QUEUE))


def test_the_claim_updates_the_rows_it_picked_by_primary_key(db, backend, loaded):
    """The claim's UPDATE finds the candidates its CTE picked by primary key, not by a
    join over the whole jobs table: PostgreSQL planned ``id IN (SELECT id FROM
    picked)`` as a hash semi-join over a sequential scan of every row, once per claim
    (Dialect.picked_ids)."""
    queue, now_ms = loaded
    sql = queue._batch.claim_returning(50)
    params = (QUEUE, now_ms, "t" * 32, now_ms + 30_000, now_ms, now_ms, QUEUE, now_ms)
    with db.atomic() as transaction:  # EXPLAIN of an UPDATE runs nothing; kept safe
        plan = PLANS[backend](db, sql, params)
        transaction.rollback()
    assert _table_scans(plan) == [], plan.text
    assert "caravel_jobs_pkey" in plan.indexes or "PRIMARY KEY" in plan.text, plan.text


def test_a_batch_completion_finds_its_rows_by_primary_key_without_statistics(db, backend):
    """The batch completion names its leases as the dialect keeps a list of ids on the
    primary key (Dialect.listed) even on a table the planner has no statistics for, as
    a table filled and drained within a minute has none: with ``id IN (<50 ids>)``,
    PostgreSQL estimated from the declared row width that reading the whole table was
    cheaper, and did so at every completion of a drain."""
    queue = make_queue(db)
    now_ms = queue._now_ms()
    _load(db, now_ms)  # and no ANALYZE
    leased = [row for row in db.execute_sql(
        "SELECT id, lease_token FROM caravel_jobs WHERE state = 'leased' "
        "AND lease_expires_at > " + db.param + " ORDER BY id", (now_ms,)).fetchall()][:50]
    assert len(leased) == 50
    sql = queue._batch.complete_many_returning(len(leased))
    params = [now_ms, now_ms, *[job_id for job_id, _ in leased], now_ms,
              *[value for pair in leased for value in pair]]
    with db.atomic() as transaction:  # EXPLAIN of an UPDATE runs nothing; kept safe
        plan = PLANS[backend](db, sql, params)
        transaction.rollback()
    assert _table_scans(plan) == [], plan.text
    assert "caravel_jobs_pkey" in plan.indexes or "PRIMARY KEY" in plan.text, plan.text
    # and the statement as built completes exactly the listed leases
    with db.atomic():
        completed = db.execute_sql(sql, params).fetchall()
    assert sorted(row[0] for row in completed) == sorted(job_id for job_id, _ in leased)


def test_a_claim_of_one_job_finds_it_by_primary_key_on_a_small_table_without_statistics(
        db, backend):
    """A claim of one job (``claim``, ``run_once``) names its picked row as a scalar,
    an equality on the primary key: with the array of Dialect.picked_ids PostgreSQL
    read a never-analysed table of 2,000 rows whole at every claim."""
    queue = make_queue(db)
    now_ms = queue._now_ms()
    values = ", ".join(["(" + ", ".join([db.param] * len(COLUMNS)) + ")"] * BATCH)
    sql = f"INSERT INTO caravel_jobs ({', '.join(COLUMNS)}) VALUES {values}"
    with db.atomic():
        for start in range(0, 2000, BATCH):
            params: List = []
            for i in range(start, start + BATCH):
                params += [str(uuid.uuid4()), QUEUE, "tenant-a", None, None,
                           "contract.ping.v1", '{"n":1}', 2, now_ms - 2000 + i, 3,
                           "pending", now_ms - 2000 + i, 0, 0, 0, now_ms, None, None,
                           None, None]
            db.execute_sql(sql, params)  # and no ANALYZE
    claim = queue._batch.claim_returning(1)
    params = (QUEUE, now_ms, "t" * 32, now_ms + 30_000, now_ms, now_ms, QUEUE, now_ms)
    with db.atomic() as transaction:
        plan = PLANS[backend](db, claim, params)
        transaction.rollback()
    assert _table_scans(plan) == [], plan.text
    lease = queue.claim(QUEUE)  # and the statement claims the best job
    assert lease is not None and lease.attempt == 1
