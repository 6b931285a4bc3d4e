"""The asyncio API: ``await queue.aenqueue(...)`` and friends, without blocking the loop.

Each call runs the synchronous method it mirrors (same validation, same guarantees)
on one of a small, bounded set of threads owned by the queue or outbox, and the
event loop only awaits the result. Why threads rather than Peewee 4's
``playhouse.pwasyncio``: that module needs its own database classes over other drivers
(aiosqlite, asyncpg, aiomysql) plus greenlet, while caravel_lite runs on the
application's ordinary ``peewee.Database`` and uses its drivers' features (psycopg's
COPY, exact row counts); a thread hop keeps one code path and one set of guarantees.

- At most ``async_threads`` calls of one queue (or outbox) run at once (default 2; set
  the attribute before the first call); more wait their turn without blocking the
  loop. Each thread keeps its own connection, as Peewee does per thread, so the
  bound is also the number of connections the asyncio API opens. Why so few: the
  threads run Python code (Peewee, and PyMySQL is pure Python) and compete with the
  event loop for the GIL; with four, a 10 ms ticker on a loaded two-core machine saw
  stalls of up to about 60 ms, with two at most about 35 ms.
- A call cancelled before its thread took it never runs; once started it runs to
  the end (an enqueue may then be committed although its caller was cancelled: use an
  idempotency key to retry safely).
- The caller's transaction, if any, is not joined: each call runs in a thread of its
  own (an in-memory SQLite database must therefore be one that every thread shares,
  as ``open_database("sqlite:///:memory:")`` opens it). To write business rows and a
  job atomically from async code, use :meth:`AsyncOutboxCalls.atransaction`.
- ``await queue.aclose()`` ends the threads and closes their connections; a later call
  starts new ones.
"""
from __future__ import annotations

import threading
import uuid
from typing import (TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Tuple,
                    TypeVar, Union)

import peewee

from caravel_lite import validation
from caravel_lite.dialect import dialect_of
from caravel_lite.errors import InvalidField
from caravel_lite.values import Dispatch, EnqueueResult, JobStatus

if TYPE_CHECKING:
    import concurrent.futures

    from caravel_lite.outbox import StageResult

# asyncio (with the ssl, socket and subprocess modules it brings) is imported when the
# first async call of a queue or outbox makes its Offload, not at import: it was about
# a seventh of caravel_lite's import time, paid at every start of the many processes
# that never make an async call.

__all__ = ["Offload", "AsyncQueueCalls", "AsyncOutboxCalls", "DEFAULT_THREADS"]

T = TypeVar("T")
DEFAULT_THREADS = 2
MAX_THREADS = 64


class Offload:
    """A bounded set of daemon threads running blocking calls over one database.

    The threads start on the first call; each opens its connection to ``db`` on its
    first statement and closes it when the offload is closed.
    """

    def __init__(self, db: peewee.Database, max_threads: int, name: str) -> None:
        self.db = db
        self.max_threads = validation.check_int("async_threads", max_threads, 1, MAX_THREADS)
        self.name = name
        import asyncio
        import concurrent.futures

        # Resolved once here, for every later call.
        self._new_future = concurrent.futures.Future
        self._wrap_future = asyncio.wrap_future
        self._items: List[Tuple["concurrent.futures.Future[Any]", Callable[[], Any]]] = []
        self._ready = threading.Condition()
        self._threads: List[threading.Thread] = []
        self._closed = False

    def submit(self, call: Callable[[], T]) -> "concurrent.futures.Future[T]":
        future: "concurrent.futures.Future[T]" = self._new_future()
        with self._ready:
            if self._closed:
                raise RuntimeError("this offload is closed")
            if not self._threads:
                # All at once, on first use: a thread started later, while the others
                # hold the GIL, would keep the event loop waiting for it to start.
                for number in range(1, self.max_threads + 1):
                    thread = threading.Thread(target=self._main, daemon=True,
                                              name=f"{self.name}-{number}")
                    self._threads.append(thread)
                    thread.start()
            self._items.append((future, call))
            self._ready.notify()
        return future

    def _main(self) -> None:
        try:
            while True:
                with self._ready:
                    while not self._items and not self._closed:
                        self._ready.wait()
                    if not self._items:
                        return  # closed and nothing left
                    future, call = self._items.pop(0)
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(call())
                    except BaseException as exc:  # delivered to the awaiting task
                        future.set_exception(exc)
        finally:
            if not self.db.is_closed():
                self.db.close()  # this thread's connection (Peewee keeps one per thread)

    def close(self) -> None:
        """Let queued calls finish, end the threads and close their connections."""
        with self._ready:
            self._closed = True
            threads = list(self._threads)
            self._ready.notify_all()
        for thread in threads:
            thread.join()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._wrap_future(self.submit(lambda: fn(*args)))


_create_lock = threading.Lock()


class _Offloading:
    """The lazily created Offload shared by the async methods of one object."""

    db: peewee.Database
    async_threads: int = DEFAULT_THREADS
    _aio_offload: Optional[Offload] = None

    def _offload(self) -> Offload:
        offload = self._aio_offload
        if offload is None:
            with _create_lock:
                offload = self._aio_offload
                if offload is None:
                    offload = Offload(self.db, self.async_threads,
                                      f"caravel-aio-{type(self).__name__.lower()}")
                    self._aio_offload = offload
        return offload

    async def aclose(self) -> None:
        """End this object's async threads and close their connections (queued calls
        finish first). A later async call starts new threads."""
        with _create_lock:
            offload, self._aio_offload = self._aio_offload, None
        if offload is not None:
            import asyncio  # a running event loop has imported it: a dictionary look-up

            await asyncio.get_running_loop().run_in_executor(None, offload.close)


class AsyncQueueCalls(_Offloading):
    """``aenqueue``, ``aenqueue_many``, ``astatus``, ``areplay``, mixed into
    :class:`caravel_lite.DatabaseQueue`: each is the synchronous method of the same
    name run on the queue's async threads, with its guarantees (see the module)."""

    if TYPE_CHECKING:  # provided by DatabaseQueue
        def enqueue(self, job: Any, dispatch: Dispatch) -> EnqueueResult: ...

        def enqueue_many(self, items: Sequence[Tuple[Any, Dispatch]]
                         ) -> List[EnqueueResult]: ...

        def status(self, job_id: Union[uuid.UUID, str], queue: str,
                   tenant_id: str) -> Optional[JobStatus]: ...

        def replay(self, job_id: Union[uuid.UUID, str], queue: str,
                   tenant_id: str) -> bool: ...

    async def aenqueue(self, job: Any, dispatch: Dispatch) -> EnqueueResult:
        """:meth:`DatabaseQueue.enqueue` without blocking the event loop."""
        return await self._offload().call(self.enqueue, job, dispatch)

    async def aenqueue_many(self, items: Sequence[Tuple[Any, Dispatch]]
                            ) -> List[EnqueueResult]:
        """:meth:`DatabaseQueue.enqueue_many` without blocking the event loop."""
        return await self._offload().call(self.enqueue_many, items)

    async def astatus(self, job_id: Union[uuid.UUID, str], queue: str,
                      tenant_id: str) -> Optional[JobStatus]:
        """:meth:`DatabaseQueue.status` without blocking the event loop."""
        return await self._offload().call(self.status, job_id, queue, tenant_id)

    async def areplay(self, job_id: Union[uuid.UUID, str], queue: str,
                      tenant_id: str) -> bool:
        """:meth:`DatabaseQueue.replay` without blocking the event loop."""
        return await self._offload().call(self.replay, job_id, queue, tenant_id)


class AsyncOutboxCalls(_Offloading):
    """``astage`` and ``atransaction``, mixed into :class:`caravel_lite.QueueOutbox`.

    :meth:`QueueOutbox.stage` must run inside the caller's transaction, and async code
    holds none on its own thread, so the transaction is opened on the outbox's thread.
    """

    if TYPE_CHECKING:  # provided by QueueOutbox
        def stage(self, job: Any, dispatch: Dispatch) -> StageResult: ...

    async def atransaction(self, work: Callable[[], T]) -> T:
        """Run ``work()`` in one transaction on the application database, on one of
        the outbox's threads, and return its result: business writes and
        :meth:`QueueOutbox.stage` calls inside ``work`` commit or roll back together
        (an exception from ``work`` rolls back and is raised here). On SQLite the
        transaction takes the write lock at BEGIN (``BEGIN IMMEDIATE``)."""
        if not callable(work):
            raise InvalidField("work", "must be a callable taking no arguments")
        dialect = dialect_of(self.db)

        def run() -> T:
            with dialect.write_transaction(self.db):
                return work()
        return await self._offload().call(run)

    async def astage(self, job: Any, dispatch: Dispatch) -> StageResult:
        """Stage one intent in a transaction of its own (nothing else is written with
        it; use :meth:`atransaction` to add business rows)."""
        return await self.atransaction(lambda: self.stage(job, dispatch))
