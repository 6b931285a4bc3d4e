"""Flow control through the outbox: a staged job of a fair queue is relayed into its
tenant's group; a concurrency key, which the outbox table cannot keep, is refused
when staged rather than dropped on the way."""
from __future__ import annotations

import pytest

from caravel_lite import InvalidField, OutboxRelay, QueueOptions, QueueOutbox
from tests.flow.jobs import QUEUE, Export, Task, make_queue, registry, to


def test_a_relayed_job_of_a_fair_queue_joins_its_tenants_group(db):
    reg = registry(concurrency_limit=1)
    outbox = QueueOutbox(db, reg, QueueOptions(fair_tenants=True))
    with db.atomic():
        outbox.stage(Task(1), to("tenant-a"))
    assert OutboxRelay(db, make_queue(db, reg, fair_tenants=True)).run_once() == 1
    assert list(db.execute_sql("SELECT flow_group FROM caravel_jobs")) == [("tenant-a",)]
    with db.atomic(), pytest.raises(InvalidField) as info:
        outbox.stage(Export(1), to("tenant-a", key="k"))
    assert info.value.field == "concurrency_key"
    assert make_queue(db, reg, fair_tenants=True).claim(QUEUE) is not None
