"""Jobs, queues and a worker loop shared by the wake-up tests."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, List, Optional, Tuple

import peewee

from caravel_lite import DatabaseQueue, Dispatch, JobRegistry, QueueOptions
from caravel_lite.worker.waiter import Waiter, Wakeup

QUEUE = "wakeup"
OTHER_QUEUE = "wakeup-other"
TENANT = "tenant-a"


@dataclass(frozen=True)
class Ping:
    n: int


registry = JobRegistry()
registry.register("wakeup.ping.v1", Ping, lambda job, ctx: None)


def make_queue(db: peewee.Database, registry_: JobRegistry = registry,
               **options: Any) -> DatabaseQueue:
    return DatabaseQueue(db, registry_, QueueOptions(**options))


def enqueue(queue: DatabaseQueue, n: int = 1, *, queue_name: str = QUEUE,
            delay: Optional[float] = None) -> Any:
    not_before = (datetime.now(timezone.utc) + timedelta(seconds=delay)
                  if delay is not None else None)
    return queue.enqueue(Ping(n), Dispatch(queue=queue_name, tenant_id=TENANT,
                                           not_before=not_before)).job_id


class Recording(Waiter):
    """Wraps a waiter: records each wait's result; ``entered`` is set once a wait has
    begun, ``idle`` while one is in progress."""

    def __init__(self, inner: Waiter) -> None:  # no super().__init__: a pure wrapper
        self.inner = inner
        self.results: List[bool] = []
        self.durations: List[float] = []  # seconds each wait lasted, beside results
        self.entered = threading.Event()
        self.idle = threading.Event()
        self.worked = 0  # found_work() calls (claims that leased jobs)

    def wait(self, wakeup: Wakeup, timeout: float) -> bool:
        self.entered.set()
        self.idle.set()
        began = time.monotonic()
        try:
            result = self.inner.wait(wakeup, timeout)
        finally:
            self.idle.clear()
        self.durations.append(time.monotonic() - began)
        self.results.append(result)
        return result

    def found_work(self) -> None:
        self.worked += 1
        self.inner.found_work()

    def close(self) -> None:
        self.inner.close()


class Started:
    """A handler recording when each job started (``time.time()``)."""

    def __init__(self) -> None:
        self.times: List[Tuple[int, float]] = []
        self.event = threading.Event()

    def __call__(self, job: Ping, ctx: Any) -> None:
        self.times.append((job.n, time.time()))
        self.event.set()


def timed_wait(waiter: Waiter, wakeup: Wakeup, timeout: float) -> Tuple[bool, float]:
    started = time.monotonic()
    result = waiter.wait(wakeup, timeout)
    return result, time.monotonic() - started
