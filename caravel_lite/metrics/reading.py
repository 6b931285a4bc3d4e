"""One scrape's reading of the queue database, shared by the metric families: each
part is read on first use and kept for the rest of the scrape, so a family that is
not rendered costs nothing and two families that need the same rows read them once."""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Tuple, TypeVar, cast

from caravel_lite.admin.filters import queue_names
from caravel_lite.admin.recent import RecentReader
from caravel_lite.admin.stats import StatsReader
from caravel_lite.admin.values import QueueSummary, TenantCounts
from caravel_lite.heartbeats import Heartbeats, WorkerInfo

T = TypeVar("T")
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
# The windows of the recent-outcome families, as their ``window`` label says them.
WINDOWS = ("1m", "1h")


class Readers:
    """The statements of a scrape, built once per collector."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self.stats = StatsReader(db)
        self.recent = RecentReader(db)


class Reading:
    """What one scrape read, at ``now_ms`` (the collector's clock). ``admin`` is the
    :class:`caravel_lite.QueueAdmin` over the same database, for families built on its
    public calls; ``tenant_label`` says whether job counts are split by tenant."""

    def __init__(self, readers: Readers, admin: Any, now_ms: int, tenant_label: bool) -> None:
        self.admin = admin
        self.now_ms = now_ms
        self.tenant_label = tenant_label
        self._readers = readers
        self._cache: Dict[str, Any] = {}
        self._started = time.perf_counter()

    def _once(self, key: str, read: Callable[[], T]) -> T:
        if key not in self._cache:
            self._cache[key] = read()
        return cast(T, self._cache[key])

    def workers(self) -> Tuple[WorkerInfo, ...]:
        """The workers' heartbeat rows as of ``now_ms`` (caravel_lite.heartbeats)."""
        return self._once("workers", lambda: Heartbeats(self._readers.db).read(self.now_ms))

    def queue_names(self) -> List[str]:
        return self._once("names", lambda: queue_names(self._readers.db))

    def queues(self) -> Tuple[QueueSummary, ...]:
        """Each queue's jobs now (ready, delayed, leased, expired, dead letters) and its
        oldest ready job; the window is empty (recent outcomes are read apart)."""
        return self._once("queues", lambda: self._readers.stats.queues(
            None, self.now_ms, self.now_ms)[0])

    def tenants(self) -> Tuple[TenantCounts, ...]:
        return self._once("tenants", lambda: self._readers.stats.tenants(
            None, self.now_ms))

    def completed(self) -> Dict[str, Tuple[int, int]]:
        return self._once("completed", lambda: self._readers.recent.completed_since(
            self.now_ms - MINUTE_MS, self.now_ms - HOUR_MS))

    def failed(self) -> Dict[Tuple[str, str], Tuple[int, int]]:
        return self._once("failed", lambda: self._readers.recent.failed_since(
            self.now_ms - MINUTE_MS, self.now_ms - HOUR_MS))

    def dead_lettered(self) -> Dict[Tuple[str, str], Tuple[int, int]]:
        return self._once("dead", lambda: self._readers.recent.dead_lettered_since(
            self.now_ms - MINUTE_MS, self.now_ms - HOUR_MS))

    def pickups(self) -> Dict[str, Tuple[float, float]]:
        """{queue: (p50, p95) seconds} of pickup latency over each queue's most recent
        finished jobs of the last hour; a queue without any is left out."""
        return self._once("pickups", lambda: self._readers.recent.pickups(
            self.queue_names(), self.now_ms - HOUR_MS))

    def elapsed(self) -> float:
        """Seconds since the reading began."""
        return time.perf_counter() - self._started
