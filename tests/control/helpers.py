"""Workers in threads and in processes for the control tests."""
from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path
from typing import Any, List, Sequence

from caravel_lite import (DatabaseQueue, Dispatch, JobState, QueueOptions, QueueWorker,
                          open_database)
from tests.control.app import QUEUE, TENANT, registry
from tests.support import wait_for


def queue_on(db_url: str, **options: Any) -> DatabaseQueue:
    options.setdefault("lease_duration", timedelta(seconds=3))
    return DatabaseQueue(open_database(db_url), registry, QueueOptions(**options))


def enqueue(queue: DatabaseQueue, job: Any, queue_name: str = QUEUE):
    return queue.enqueue(job, Dispatch(queue=queue_name, tenant_id=TENANT)).job_id


def state_of(queue: DatabaseQueue, job_id, queue_name: str = QUEUE) -> JobState:
    return queue.status(job_id, queue_name, TENANT).state


def wait_state(queue: DatabaseQueue, job_id, wanted: JobState, timeout: float = 10.0,
               queue_name: str = QUEUE) -> None:
    wait_for(lambda: state_of(queue, job_id, queue_name) is wanted, timeout,
             message=f"job {job_id} {wanted.value}")


def wait_ready(directory: Path, job_id, timeout: float = 10.0) -> None:
    wait_for(lambda: (directory / str(job_id)).exists(), timeout,
             message=f"job {job_id} started")


class Running:
    """``QueueWorker.run`` in a thread, on its own connection, until :meth:`stop`."""

    def __init__(self, db_url: str, names: Sequence[str] = (QUEUE,), prefetch: Any = None,
                 **options: Any) -> None:
        self.queue = queue_on(db_url, **options)
        self.worker = QueueWorker(self.queue, poll_interval=0.2, prefetch=prefetch)
        self.halt = threading.Event()
        self.errors: List[BaseException] = []
        self.thread = threading.Thread(target=self._main, args=(list(names),), daemon=True)
        self.thread.start()

    def _main(self, names: List[str]) -> None:
        try:
            self.worker.run(names, stop=self.halt)
        except BaseException as exc:  # reported by stop()
            self.errors.append(exc)
        finally:
            self.queue.db.close()

    def stop(self) -> None:
        self.halt.set()
        self.thread.join(15)
        assert not self.thread.is_alive(), "worker did not stop"
        if self.errors:
            raise self.errors[0]
