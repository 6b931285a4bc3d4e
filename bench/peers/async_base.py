"""For asyncio peers: one event loop per process, and a stop watcher for serve()."""
from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

from bench.peers.base import Peer

T = TypeVar("T")


class AsyncPeer(Peer):
    def run(self, awaitable: Awaitable[T]) -> T:
        loop = getattr(self, "_loop", None)
        if loop is None:
            loop = self._loop = asyncio.new_event_loop()
        return loop.run_until_complete(awaitable)

    def close(self) -> None:
        loop = getattr(self, "_loop", None)
        if loop is not None:
            loop.close()


async def until_stopped(stop: Any, action: Callable[[], Any]) -> None:
    """Call ``action`` once the multiprocessing ``stop`` event is set."""
    while not stop.is_set():
        await asyncio.sleep(0.05)
    action()
