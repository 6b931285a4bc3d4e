"""Entry points the workflow tests run in other processes (spawn context: each child
imports this module afresh and opens its own database from the URL)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

from caravel_lite import open_database
from tests.workflows.jobs import Step, make_queue, to

TIMEOUT = 120  # generous: the machine is shared with other suites
WINDOW = timedelta(seconds=30)


def enqueue_debounced(url: str, barrier: Any, tag: str, calls: int, results: Any) -> None:
    """``calls`` debounced enqueues of one key, as fast as they go, after the barrier."""
    db = open_database(url)
    db.connect()
    try:
        queue = make_queue(db)
        barrier.wait(timeout=60)
        ids = {str(queue.enqueue(Step(f"{tag}-{n}"),
                                 to(debounce=WINDOW, debounce_key="user-7")).job_id)
               for n in range(calls)}
        results.put(sorted(ids))
    finally:
        db.close()


def finish_members(url: str, barrier: Any, threads: int, results: Any) -> None:
    """``threads`` threads claiming and completing one job at a time until none is
    due; reports how many this process completed."""
    import threading

    from tests.workflows.jobs import QUEUE

    db = open_database(url)
    queue = make_queue(db)
    done = []

    def work() -> None:
        try:
            barrier.wait(timeout=60)
            while True:
                leases = queue.claim_many(QUEUE, 1)
                if not leases:
                    return
                if queue.complete(leases[0]):
                    done.append(1)
        finally:
            db.close()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(TIMEOUT)
    results.put(len(done))


def die_inside_the_last_completion(url: str, results: Any) -> None:
    """Claim the batch's last member and complete it, but stop (to be killed) inside
    the completing transaction, after the member's UPDATE and before the count and
    the callback's release."""
    import time

    from caravel_lite.workflows import follow
    from tests.workflows.jobs import QUEUE

    def stop_here(self: Any, *args: Any) -> None:
        results.put("inside")
        time.sleep(600)

    follow.FollowUps.after = stop_here  # type: ignore[method-assign]
    db = open_database(url)
    queue = make_queue(db, lease_duration=timedelta(seconds=2))
    lease = queue.claim(QUEUE)
    queue.complete(lease)


def complete_the_last_then_wait(url: str, results: Any) -> None:
    """Complete the batch's last member (committed), then wait to be killed before
    any worker picks the callback up."""
    import time

    from tests.workflows.jobs import QUEUE

    db = open_database(url)
    queue = make_queue(db)
    lease = queue.claim(QUEUE)
    results.put(("completed", queue.complete(lease)))
    time.sleep(600)
