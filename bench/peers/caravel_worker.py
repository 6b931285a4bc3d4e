"""caravel_lite draining through QueueWorker.run_once (handler dispatch included): with
the default settings (one job per claim and per acknowledgement), and prefetching
(several leases per claim, acknowledgements in fenced batches)."""
from __future__ import annotations

import importlib.util
from typing import Optional

from bench.peers.caravel import AsyncSleepJob, CaravelPeer


class CaravelWorkerPeer(CaravelPeer):
    name = "caravel_lite QueueWorker"
    scenarios = ("drain",)

    @classmethod
    def unavailable(cls, kind: str) -> Optional[str]:
        if importlib.util.find_spec("caravel_lite.worker") is None:
            return "not implemented (no caravel_lite.worker)"
        return super().unavailable(kind)

    prefetch = 1  # QueueWorker's default

    def drain(self) -> int:
        return self.drain_run_once(prefetch=self.prefetch)


class CaravelPrefetchPeer(CaravelWorkerPeer):
    prefetch = 50
    name = f"caravel_lite QueueWorker prefetch={prefetch}"


class CaravelAsyncPeer(CaravelPeer):
    """The concurrency scenario with ``async def`` handlers (one event loop per worker)."""

    name = "caravel_lite async handlers"
    scenarios = ("sleep",)

    sleep_type = AsyncSleepJob
