"""Entry points run in separate processes by the concurrency tests (spawn context:
each child imports this module afresh and opens its own database from the URL)."""
from __future__ import annotations

from typing import Any, List

from caravel_lite import open_database
from tests.contract.jobs import QUEUE, Ping, dispatch, make_queue


def _open(url: str):
    db = open_database(url)
    db.connect()
    return db


def enqueue_same_key(url: str, barrier: Any, results: Any) -> None:
    db = _open(url)
    try:
        queue = make_queue(db)
        barrier.wait(timeout=60)
        result = queue.enqueue(Ping(1), dispatch("shared-key"))
        results.put((str(result.job_id), result.already_enqueued))
    finally:
        db.close()


def claim_once(url: str, barrier: Any, results: Any) -> None:
    db = _open(url)
    try:
        queue = make_queue(db)
        barrier.wait(timeout=60)
        lease = queue.claim(QUEUE)
        results.put(None if lease is None else str(lease.job_id))
    finally:
        db.close()


def drain(url: str, barrier: Any, results: Any) -> None:
    """Claim and complete until the queue has nothing ready; report what completed."""
    db = _open(url)
    done: List[str] = []
    try:
        queue = make_queue(db)
        barrier.wait(timeout=60)
        while True:
            lease = queue.claim(QUEUE)
            if lease is None:
                # A claim may come back empty after losing several races in a row;
                # stop only once nothing is left to take.
                if queue.size(QUEUE) == 0:
                    break
                continue
            if queue.complete(lease):
                done.append(str(lease.job_id))
        results.put(done)
    finally:
        db.close()
