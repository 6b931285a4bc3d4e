"""Inside Peewee's ``db.manual_commit()`` (issue #11 item 5), enqueue and enqueue_many
join the caller's transaction exactly as QueueOutbox.stage does: nothing is committed
by the queue, a rollback leaves nothing, a commit keeps everything, and a duplicate
key leaves the transaction usable."""
from __future__ import annotations

import pytest

from caravel_lite import QueueOutbox
from tests.contract.jobs import Ping, dispatch, make_queue, registry, row_count


def _stage_all(db, queue, outbox):
    queue.enqueue(Ping(1), dispatch("one"))
    queue.enqueue_many([(Ping(2), dispatch()), (Ping(3), dispatch("three"))])
    outbox.stage(Ping(4), dispatch("four"))


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_enqueue_and_enqueue_many_join_a_manual_commit_transaction(db, connect, ending):
    queue = make_queue(db)
    outbox = QueueOutbox(db, registry)
    observer = connect()
    with db.manual_commit():
        db.begin()
        _stage_all(db, queue, outbox)
        assert row_count(db) == 3 and row_count(db, "caravel_outbox") == 1
        # another connection sees nothing yet: the queue committed nothing
        assert row_count(observer) == 0
        getattr(db, ending)()
    expected = (3, 1) if ending == "commit" else (0, 0)
    assert (row_count(observer), row_count(observer, "caravel_outbox")) == expected


def test_a_duplicate_key_inside_manual_commit_leaves_the_transaction_usable(db):
    queue = make_queue(db)
    with db.manual_commit():
        db.begin()
        first = queue.enqueue(Ping(1), dispatch("same"))
        again = queue.enqueue(Ping(1), dispatch("same"))
        batch = queue.enqueue_many([(Ping(1), dispatch("same")), (Ping(2), dispatch())])
        db.commit()
    assert again.already_enqueued and again.job_id == first.job_id
    assert batch[0].job_id == first.job_id and batch[0].already_enqueued
    assert row_count(db) == 2
