"""What both huey storages share: the task, the drain loop and the default consumer.

huey removes a task's row when it dequeues it (no lease), so it keeps no history and
a crashed worker loses the task; its figures are a speed reference, not a like-for-like
guarantee.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Any

from bench import probe
from bench.peers.base import Peer, stamped


def noop(n: int, sent: float) -> None:
    if sent:
        probe.hit(sent)


class HueyPeer(Peer):
    requires = ("huey",)
    claim_reason = "n/a: deletes the row at dequeue, keeps no history"

    def make_huey(self) -> Any:
        raise NotImplementedError

    def open(self) -> None:
        self.huey = self.make_huey()
        self.task = self.huey.task(name="bench_noop")(noop)

    def install(self) -> None:
        pass  # huey creates its tables on first use (create_tables=True)

    def close(self) -> None:
        self.huey.storage.close()

    def enqueue_one(self, i: int) -> None:
        self.task(i, 0.0)

    def enqueue_stamped(self) -> None:
        self.task(1, stamped())

    def drain(self) -> int:
        # What huey's worker thread does per task, minus its sleeps.
        done = 0
        while True:
            task = self.huey.dequeue()
            if task is None:
                return done
            self.huey.execute(task)
            done += 1

    def serve(self, stop: Any) -> None:
        consumer = self.huey.create_consumer()  # defaults: 1 thread worker, 0.1 s..10 s polling

        def stop_later() -> None:
            stop.wait()
            os.kill(os.getpid(), signal.SIGINT)  # huey's graceful shutdown
        threading.Thread(target=stop_later, daemon=True).start()
        consumer.run()
