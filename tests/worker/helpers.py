"""Small helpers for the worker tests: queues, enqueueing, threads that record errors."""
from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any, List, Optional

import peewee

from caravel_lite import DatabaseQueue, Dispatch, JobStatus, QueueOptions, QueueWorker

QUEUE = "work"
TENANT = "tenant-a"


def options(lease: float = 2.0, renew: Optional[float] = None, **extra: Any) -> QueueOptions:
    return QueueOptions(lease_duration=timedelta(seconds=lease),
                        lease_renewal_interval=(timedelta(seconds=renew)
                                                if renew is not None else None),
                        **extra)


def enqueue(queue: DatabaseQueue, job: Any, tenant: str = TENANT) -> uuid.UUID:
    return queue.enqueue(job, Dispatch(queue=QUEUE, tenant_id=tenant)).job_id


def status(queue: DatabaseQueue, job_id: uuid.UUID, tenant: str = TENANT) -> JobStatus:
    found = queue.status(job_id, queue=QUEUE, tenant_id=tenant)
    assert found is not None
    return found


class WorkerThread:
    """``worker.run`` in a thread over its own connection; keeps any exception."""

    def __init__(self, worker: QueueWorker, stop: threading.Event) -> None:
        self.worker = worker
        self.stop = stop
        self.errors: List[BaseException] = []
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            self.worker.run(QUEUE, stop=self.stop)
        except BaseException as exc:  # reported by join()
            self.errors.append(exc)
        finally:
            self.worker.queue.db.close()

    def start(self) -> "WorkerThread":
        self.thread.start()
        return self

    def join(self, timeout: float = 10.0) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker thread did not stop"
        if self.errors:
            raise self.errors[0]


def counting(queue_class: type, method: str) -> type:
    """A DatabaseQueue subclass counting calls of ``method`` in ``.calls``."""
    def wrapper(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return getattr(queue_class, method)(self, *args, **kwargs)
    return type(f"Counting{method.title()}", (queue_class,), {"calls": 0, method: wrapper})


def raising(*methods: str) -> type:
    """A DatabaseQueue subclass whose ``methods`` fail like a lost database."""
    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise peewee.OperationalError("simulated outage")
    return type(f"Broken{methods[0].title()}", (DatabaseQueue,),
                {method: broken for method in methods})
