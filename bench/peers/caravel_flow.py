"""caravel_lite under flow control (issue 27), beside the unlimited caravel_lite rows:
a fair queue whose jobs spread over 1,000 tenants, every job under one concurrency key
limited to 5, and a queue rate-limited to 1,000 starts a second (above what one
default worker drains, so the row shows what the gate costs, not the limit)."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Dict

from bench.peers.base import QUEUE
from bench.peers.caravel import TENANT, WIRE, BenchJob, CaravelPeer, noop

TENANTS = 1000


class _FlowPeer(CaravelPeer):
    scenarios = ("enqueue", "default")
    options: Dict[str, Any] = {}
    type_options: Dict[str, Any] = {}
    key = None

    def open(self) -> None:
        super().open()
        cl = self.cl
        registry = cl.JobRegistry()
        registry.register(WIRE, BenchJob, noop, **self.type_options)
        self.queue = cl.DatabaseQueue(self.db, registry, cl.QueueOptions(**self.options))
        self.dispatch = cl.Dispatch(queue=QUEUE, tenant_id=TENANT, concurrency_key=self.key)

    def prefill(self, n: int) -> None:
        self.queue.enqueue_many([(BenchJob(i, 0.0), self._dispatch(i)) for i in range(n)])

    def _dispatch(self, i: int) -> Any:
        return self.dispatch


class FairPeer(_FlowPeer):
    name = "caravel_lite fair, 1,000 tenants"
    options = {"fair_tenants": True}

    def _dispatch(self, i: int) -> Any:
        return self.cl.Dispatch(queue=QUEUE, tenant_id=f"tenant-{i % TENANTS}")

    def enqueue_one(self, i: int) -> None:
        self.queue.enqueue(BenchJob(i, 0.0), self._dispatch(i))


class LimitedPeer(_FlowPeer):
    name = "caravel_lite one key, concurrency_limit=5"
    type_options = {"concurrency_limit": 5}
    key = "bench-key"


class RatePeer(_FlowPeer):
    name = "caravel_lite rate_limit=(1000, 1 s)"
    options = {"rate_limit": (1000, timedelta(seconds=1))}
