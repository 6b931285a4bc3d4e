"""Entry points run in separate processes by the concurrency tests (spawn context:
each child imports this module afresh and opens its own database from the URL)."""
from __future__ import annotations

import multiprocessing
import os
from typing import Any, Callable, List

from caravel_lite import dialect as dialect_module
from caravel_lite import open_database
from caravel_lite import queue as queue_module
from tests.contract.jobs import QUEUE, Ping, dispatch, make_queue

TIMEOUT = 120  # generous: the machine is shared with other suites
CLAIM_PATH_VARIABLE = "CARAVEL_TEST_CLAIM_PATH"


def apply_claim_path(setattr_: Callable[[Any, str, Any], None] = setattr) -> None:
    """Make queues built from now on claim by the portable path when the
    CARAVEL_TEST_CLAIM_PATH environment variable says ``portable`` (the
    ``claim_path`` fixture sets it; children of a test call this on start)."""
    if os.environ.get(CLAIM_PATH_VARIABLE) == "portable":
        setattr_(queue_module, "dialect_of",
                 lambda db: dialect_module.dialect_of(db).portable())


def _open(url: str):
    apply_claim_path()
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


def in_processes(count: int, target: Callable, url: str) -> List[Any]:
    """Run ``target(url, barrier, results)`` in ``count`` spawned processes; return what
    each put on ``results``, after checking that every child exited 0."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(count)
    results = ctx.Queue()
    children = [ctx.Process(target=target, args=(url, barrier, results)) for _ in range(count)]
    for child in children:
        child.start()
    try:
        collected = [results.get(timeout=TIMEOUT) for _ in children]
    finally:
        for child in children:
            child.join(timeout=TIMEOUT)
            if child.is_alive():
                child.kill()
    assert [child.exitcode for child in children] == [0] * count
    return collected
