"""Fair claiming across tenants (QueueOptions(fair_tenants=True)), on every database."""
from __future__ import annotations

import os
from datetime import datetime, timezone

from freezegun import freeze_time

from caravel_lite import Priority
from tests.flow.jobs import QUEUE, Task, make_queue, to

# The flood of tenant A: 100,000 in the full run, fewer in CI (the claim's cost does
# not depend on it: test_flow_plans proves that on every database).
FLOOD = 2_000 if os.environ.get("CI") else 100_000


def _flood(queue, tenant: str, count: int) -> None:
    for start in range(0, count, 1000):
        queue.enqueue_many([(Task(i), to(tenant)) for i in range(start, min(count, start + 1000))])


def test_a_tenants_one_job_starts_within_one_rotation_behind_a_flood(db):
    queue = make_queue(db, fair_tenants=True)
    _flood(queue, "tenant-a", FLOOD)
    queue.claim(QUEUE)  # a worker already busy with the flood
    job = queue.enqueue(Task(-1), to("tenant-b")).job_id
    taken = [queue.claim(QUEUE) for _ in range(2)]
    assert job in [lease.job_id for lease in taken]


def test_the_same_flood_on_an_unfair_queue_holds_the_job_back(db):
    queue = make_queue(db)
    _flood(queue, "tenant-a", 200)
    job = queue.enqueue(Task(-1), to("tenant-b")).job_id
    order = [queue.claim(QUEUE).job_id for _ in range(201)]
    assert order.index(job) == 200


def test_three_tenants_interleave_and_priority_orders_within_a_tenant(db):
    queue = make_queue(db, fair_tenants=True)
    for tenant in ("t1", "t2", "t3"):
        for i in range(3):
            queue.enqueue(Task(i), to(tenant))
    urgent = queue.enqueue(Task(99), to("t3", priority=Priority.CRITICAL)).job_id
    leases = [queue.claim(QUEUE) for _ in range(10)]
    assert all(lease is not None for lease in leases)
    tenants = [lease.context.tenant_id for lease in leases]
    assert tenants[:9] == ["t1", "t2", "t3"] * 3
    assert leases[2].job_id == urgent  # t3's turn runs t3's most urgent job
    assert queue.claim(QUEUE) is None


def test_claim_many_takes_one_job_per_tenant_per_turn(db):
    queue = make_queue(db, fair_tenants=True)
    _flood(queue, "tenant-a", 50)
    queue.enqueue(Task(1), to("tenant-b"))
    queue.enqueue(Task(2), to("tenant-c"))
    tenants = sorted(lease.context.tenant_id for lease in queue.claim_many(QUEUE, 4))
    assert tenants == ["tenant-a", "tenant-a", "tenant-b", "tenant-c"]


def test_a_job_moving_ahead_between_two_visits_is_not_leased_twice(db, monkeypatch):
    """The second visit of a group in one claim reads the group again; a job that moved
    ahead meanwhile (here: an urgent one enqueued between the visits, as a retry falling
    due would) must not shift the first visit's job into the second's place (the chaos
    run found one lease handed to a worker twice)."""
    from caravel_lite.fairness import GroupClaimer

    queue = make_queue(db, fair_tenants=True)
    for i in range(3):
        queue.enqueue(Task(i), to("tenant-a"))
    gate = GroupClaimer._gate
    calls = []

    def gate_and_enqueue(self, *args, **kwargs):
        if not calls:
            queue.enqueue(Task(99), to("tenant-a", priority=Priority.CRITICAL))
        calls.append(1)
        return gate(self, *args, **kwargs)

    monkeypatch.setattr(GroupClaimer, "_gate", gate_and_enqueue)
    with freeze_time(datetime.now(timezone.utc), tick=False):  # the new job is due
        leases = queue.claim_many(QUEUE, 2)
    assert len({lease.job_id for lease in leases}) == len(leases) == 2
