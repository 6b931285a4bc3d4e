"""procrastinate on PostgreSQL through its psycopg connector."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from bench import probe
from bench.peers.async_base import AsyncPeer, until_stopped
from bench.peers.base import QUEUE, stamped
from bench.tally import TALLY
from bench.timing import Sample, timed_once

_count = [0]
_last = [0.0]


def noop(n: int, sent: float) -> None:
    TALLY.begin()
    _count[0] += 1
    _last[0] = time.monotonic()
    if sent:
        probe.hit(sent)
    TALLY.hit()


async def sleep(n: int, seconds: float) -> None:
    TALLY.begin()
    await asyncio.sleep(seconds)
    _count[0] += 1
    _last[0] = time.monotonic()
    TALLY.hit()


class ProcrastinatePeer(AsyncPeer):
    name = "procrastinate"
    kinds = ("postgres",)
    requires = ("procrastinate", "psycopg")

    def open(self) -> None:
        import procrastinate

        self.app = procrastinate.App(connector=procrastinate.PsycopgConnector(
            conninfo=self.target.url))
        self.task = self.app.task(name="bench_noop", queue=QUEUE)(noop)
        self.sleep_task = self.app.task(name="bench_sleep", queue=QUEUE)(sleep)
        self.run(self.app.open_async())

    def install(self) -> None:
        self.run(self.app.schema_manager.apply_schema_async())

    def close(self) -> None:
        self.run(self.app.close_async())
        super().close()

    def enqueue_one(self, i: int) -> None:
        self.run(self.task.defer_async(n=i, sent=0.0))

    def enqueue_bulk(self, n: int) -> Sample:
        kwargs = [{"n": i, "sent": 0.0} for i in range(n)]
        return timed_once(lambda: self.run(self.task.batch_defer_async(*kwargs)), n)

    def enqueue_stamped(self) -> None:
        self.run(self.task.defer_async(n=1, sent=stamped()))

    def drain(self, **settings: Any) -> int:
        _count[0] = 0
        self.run(self.app.run_worker_async(queues=[QUEUE], wait=False,
                                           install_signal_handlers=False, **settings))
        self.last_done = _last[0] or None
        return _count[0]

    def _drain_until(self, expected: int, **settings: Any) -> int:
        """``run_worker_async(wait=False)`` until the queue is empty, or cancelled once
        the drain's tally says so (all ran, or the round's time budget is spent)."""
        _count[0] = 0

        async def go() -> None:
            loop = asyncio.get_running_loop()
            worker = asyncio.ensure_future(self.app.run_worker_async(
                queues=[QUEUE], wait=False, install_signal_handlers=False, **settings))
            TALLY.arm(expected, lambda: loop.call_soon_threadsafe(worker.cancel))
            try:
                await worker
            except asyncio.CancelledError:
                pass
        self.run(go())
        self.last_done = _last[0] or None
        return _count[0]

    def drain_default(self, expected: int) -> int:
        """``run_worker_async`` with its defaults (concurrency 1), until the queue is empty."""
        return self._drain_until(expected)

    def prefill_sleep(self, n: int, seconds: float) -> None:
        kwargs = [{"n": i, "seconds": seconds} for i in range(n)]
        self.run(self.sleep_task.batch_defer_async(*kwargs))

    def drain_sleep(self, expected: int, concurrency: int) -> int:
        """``run_worker_async(concurrency=N)``, async handlers."""
        return self._drain_until(expected, concurrency=concurrency)

    def serve(self, stop: Any) -> None:
        async def serve() -> None:
            worker = asyncio.ensure_future(self.app.run_worker_async(
                queues=[QUEUE], install_signal_handlers=False))  # otherwise defaults
            await until_stopped(stop, worker.cancel)
            try:
                await worker
            except asyncio.CancelledError:
                pass
        self.run(serve())
