"""The executor: runs handlers so that the worker's loop never waits for one.

Sync handlers run on a pool of at most ``concurrency`` threads, started on demand and
kept (no thread per job). ``async def`` handlers run as tasks on one long-lived event
loop, in a thread of its own, started with the first such job and kept until the
executor closes (no event loop per job). A worker makes a fresh executor for each run,
so nothing a run left behind (a thread inside an abandoned handler, the stop requests
queued for its threads) reaches the next run. The loop thread hands jobs over and never
touches their database connections: handlers run here, acknowledgements are written by
the worker's loop. Threads are daemons, so a process asked to exit at once (a second SIGINT) is not
held up by a handler that ignores cancellation.
"""
from __future__ import annotations

import queue as stdqueue
import threading
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Dict, List, Optional

from caravel_lite.logfields import fields
from caravel_lite.observability import logger

if TYPE_CHECKING:
    import asyncio

__all__ = ["Executor"]

# asyncio is imported when the event loop starts (the first async job), not at import:
# it was about a seventh of caravel_lite's import time, and a worker running only sync
# handlers never needs it. Everything below that uses it runs on or after
# that loop's start.


class Executor:
    """Threads for sync handlers and one event loop for async ones."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self._work: "stdqueue.SimpleQueue[Optional[Callable[[], None]]]" = stdqueue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._busy = 0
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._loop_thread: Optional[threading.Thread] = None

    # -- sync handlers -------------------------------------------------------------------

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` on a pool thread. The caller keeps at most ``concurrency`` jobs in
        flight, so a free thread (or room for a new one) always exists."""
        with self._lock:
            self._busy += 1
            if self._busy > len(self._threads) and len(self._threads) < self.concurrency:
                thread = threading.Thread(target=self._serve, daemon=True,
                                          name=f"caravel-handler-{len(self._threads) + 1}")
                self._threads.append(thread)
                thread.start()
        self._work.put(work)

    def _serve(self) -> None:
        while True:
            work = self._work.get()
            if work is None:
                return
            try:
                work()
            except BaseException as exc:  # work reports its own outcome; never lose the thread
                logger.exception("caravel_lite: unexpected error in a handler thread",
                                 extra=fields(error_type=type(exc).__name__))
            finally:
                with self._lock:
                    self._busy -= 1

    # -- async handlers ----------------------------------------------------------------

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The worker's event loop, started on first use."""
        with self._lock:
            if self._loop is None:
                global asyncio
                import asyncio

                loop = asyncio.new_event_loop()
                ready = threading.Event()
                thread = threading.Thread(target=self._run_loop, args=(loop, ready),
                                          name="caravel-event-loop", daemon=True)
                thread.start()
                ready.wait()
                self._loop, self._loop_thread = loop, thread
            return self._loop

    @staticmethod
    def _run_loop(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        while True:
            try:
                loop.run_forever()
                return  # stopped by close()
            except BaseException as exc:
                # asyncio re-raises a SystemExit or KeyboardInterrupt that a task let
                # out (a task a handler made, a callback it scheduled) out of
                # run_forever; the loop itself is intact. Run it again: else the
                # handler waiting on that task, and every async job after it, never
                # runs again (the handler then gets the error from what it awaited).
                logger.error("caravel_lite: %s escaped a task on the worker's event "
                             "loop; the loop goes on", type(exc).__name__,
                             extra=fields(error_type=type(exc).__name__))

    def spawn(self, make: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start the coroutine ``make()`` as a task on the worker's event loop."""
        loop = self.loop
        loop.call_soon_threadsafe(lambda: loop.create_task(make()))

    def run_coroutine(self, awaitable: Any,
                      on_task: Callable[["asyncio.Future[Any]"], None]) -> Any:
        """Await ``awaitable`` on the worker's event loop from a handler thread and
        return its result; ``on_task`` receives the task first (to cancel it)."""
        loop = self.loop
        done = threading.Event()
        box: Dict[str, Any] = {}

        async def runner() -> None:
            task = asyncio.current_task()
            assert task is not None
            on_task(task)
            try:
                box["result"] = await awaitable
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc
            finally:
                done.set()

        loop.call_soon_threadsafe(lambda: loop.create_task(runner()))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box.get("result")

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """End idle threads and the event loop once its tasks are done. Threads still
        running a handler (abandoned after a shutdown timeout) end when it returns."""
        with self._lock:
            threads, self._threads = self._threads, []
            loop, self._loop = self._loop, None
            thread, self._loop_thread = self._loop_thread, None
        for _ in threads:
            self._work.put(None)
        if loop is not None and thread is not None:
            def finish() -> None:
                pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
                if pending:  # abandoned: let them end, then stop
                    gathered = asyncio.gather(*pending, return_exceptions=True)
                    gathered.add_done_callback(lambda _: loop.stop())
                else:
                    loop.stop()
            loop.call_soon_threadsafe(finish)
            thread.join(1.0)
            if not thread.is_alive():
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()
