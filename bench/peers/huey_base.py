"""What both huey storages share: the tasks, the drain loop and the default consumer.

huey removes a task's row when it dequeues it (no lease), so it keeps no history and
a crashed worker loses the task; its figures are a speed reference, not a like-for-like
guarantee.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Optional

from bench import probe
from bench.peers.base import Peer, stamped
from bench.tally import TALLY


def noop(n: int, sent: float) -> None:
    TALLY.begin()
    if sent:
        probe.hit(sent)
    TALLY.hit()


def sleep(n: int, seconds: float) -> None:
    TALLY.begin()
    time.sleep(seconds)
    TALLY.hit()


def _interrupt_self() -> None:
    os.kill(os.getpid(), signal.SIGINT)  # huey's graceful shutdown


class HueyPeer(Peer):
    requires = ("huey",)
    claim_reason = "n/a: deletes the row at dequeue, keeps no history"

    def make_huey(self) -> Any:
        raise NotImplementedError

    def open(self) -> None:
        self.huey = self.make_huey()
        self.task = self.huey.task(name="bench_noop")(noop)
        self.sleep_task = self.huey.task(name="bench_sleep")(sleep)

    def install(self) -> None:
        pass  # huey creates its tables on first use (create_tables=True)

    def close(self) -> None:
        self.huey.storage.close()

    def enqueue_one(self, i: int) -> None:
        self.task(i, 0.0)

    def enqueue_stamped(self) -> None:
        self.task(1, stamped())

    def drain(self) -> int:
        return self.drain_run_once()

    def drain_run_once(self, budget: Optional[float] = None) -> int:
        """What huey's worker thread does per task, minus its sleeps: ``dequeue()`` then
        ``execute(task)`` until nothing is dequeued (also huey's fastest drain loop)."""
        end = None if budget is None else time.perf_counter() + budget
        done = 0
        while end is None or time.perf_counter() < end:
            task = self.huey.dequeue()
            if task is None:
                break
            self.huey.execute(task)
            done += 1
        return done

    def serve(self, stop: Any) -> None:
        consumer = self.huey.create_consumer()  # defaults: 1 thread worker, 0.1 s..10 s polling

        def stop_later() -> None:
            stop.wait()
            _interrupt_self()
        threading.Thread(target=stop_later, daemon=True).start()
        consumer.run()

    def _consume(self, expected: int, **settings: Any) -> int:
        TALLY.arm(expected, _interrupt_self)
        self.huey.create_consumer(**settings).run()
        self.last_done = TALLY.last_done
        return TALLY.done

    def drain_default(self, expected: int) -> int:
        """huey's default consumer (one worker thread) until ``expected`` tasks ran."""
        return self._consume(expected)

    def prefill_sleep(self, n: int, seconds: float) -> None:
        for i in range(n):
            self.sleep_task(i, seconds)

    def drain_sleep(self, expected: int, concurrency: int) -> int:
        """huey's consumer with ``workers=N`` threads."""
        return self._consume(expected, workers=concurrency)
