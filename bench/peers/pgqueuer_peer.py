"""pgqueuer on PostgreSQL through its psycopg async driver."""
from __future__ import annotations

import asyncio
import time
from typing import Any

from bench import probe
from bench.peers.async_base import AsyncPeer, until_stopped
from bench.peers.base import stamped
from bench.tally import TALLY
from bench.timing import Sample, timed_once

ENTRYPOINT = "bench_noop"
SLEEP = "bench_sleep"


class PgQueuerPeer(AsyncPeer):
    name = "pgqueuer"
    kinds = ("postgres",)
    requires = ("pgqueuer", "psycopg")

    def open(self) -> None:
        self.conn = self.run(self._connect())

    async def _connect(self) -> Any:
        import psycopg

        return await psycopg.AsyncConnection.connect(self.target.url, autocommit=True)

    def _driver(self) -> Any:
        from pgqueuer import PsycopgDriver

        return PsycopgDriver(self.conn)

    def _queries(self) -> Any:
        from pgqueuer import Queries

        queries = getattr(self, "_q", None)
        if queries is None:
            queries = self._q = Queries(self._driver())
        return queries

    def install(self) -> None:
        self.run(self._queries().install())

    def close(self) -> None:
        self.run(self.conn.close())
        super().close()

    def enqueue_one(self, i: int) -> None:
        self.run(self._queries().enqueue(ENTRYPOINT, b"%d" % i))

    def enqueue_bulk(self, n: int) -> Sample:
        payloads = [b"%d" % i for i in range(n)]
        queries = self._queries()
        return timed_once(lambda: self.run(
            queries.enqueue([ENTRYPOINT] * n, payloads, [0] * n)), n)

    def enqueue_stamped(self) -> None:
        self.run(self._queries().enqueue(ENTRYPOINT, repr(stamped()).encode()))

    def _manager(self, on_job: Any) -> Any:
        from pgqueuer import QueueManager

        manager = QueueManager(self._queries())

        @manager.entrypoint(ENTRYPOINT)
        async def noop(job: Any) -> None:
            TALLY.begin()
            on_job(job)
            TALLY.hit()
        return manager

    def drain(self) -> int:
        from pgqueuer.domain.types import QueueExecutionMode

        done = [0]

        def count(job: Any) -> None:
            done[0] += 1
            self.last_done = time.monotonic()  # drain mode exits seconds after this
        manager = self._manager(count)
        self.run(manager.run(mode=QueueExecutionMode.drain))
        return done[0]

    def _stoppable(self, manager: Any, expected: int) -> None:
        """Stop ``manager`` once the drain's tally says so (all jobs ran, or the
        benchmark's time budget for the round is spent)."""
        loop = self._loop
        TALLY.arm(expected, lambda: loop.call_soon_threadsafe(manager.shutdown.set))

    def drain_default(self, expected: int) -> int:
        """pgqueuer's drain mode has its defaults (batches of 10, no concurrency cap)."""
        from pgqueuer.domain.types import QueueExecutionMode

        manager = self._manager(lambda job: None)
        self._stoppable(manager, expected)
        self.run(manager.run(mode=QueueExecutionMode.drain))
        self.last_done = TALLY.last_done
        return TALLY.done

    def prefill_sleep(self, n: int, seconds: float) -> None:
        payload = repr(seconds).encode()
        self.run(self._queries().enqueue([SLEEP] * n, [payload] * n, [0] * n))

    def drain_sleep(self, expected: int, concurrency: int) -> int:
        """``QueueManager.run(mode=drain, max_concurrent_tasks=N)``, async handlers; the
        batch size is its default (10) unless N is below 20."""
        from pgqueuer import QueueManager
        from pgqueuer.domain.types import QueueExecutionMode

        manager = QueueManager(self._queries())

        @manager.entrypoint(SLEEP)
        async def sleep(job: Any) -> None:
            TALLY.begin()
            await asyncio.sleep(float(job.payload.decode()))
            TALLY.hit()
        self._stoppable(manager, expected)
        # pgqueuer requires max_concurrent_tasks >= 2 x batch_size (default batch: 10).
        self.run(manager.run(mode=QueueExecutionMode.drain, max_concurrent_tasks=concurrency,
                             batch_size=max(1, min(10, concurrency // 2))))
        self.last_done = TALLY.last_done
        return TALLY.done

    def serve(self, stop: Any) -> None:
        manager = self._manager(lambda job: probe.hit(float(job.payload.decode())))

        async def serve() -> None:
            watcher = asyncio.ensure_future(until_stopped(stop, manager.shutdown.set))
            try:
                await manager.run()  # default settings
            finally:
                watcher.cancel()
        self.run(serve())
