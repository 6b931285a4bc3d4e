"""caravel_lite through its public API: enqueue (one per call, or enqueue_many), claim +
complete one job at a time, and ``QueueWorker`` with its defaults or at a concurrency."""
from __future__ import annotations

import asyncio
import inspect
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Optional, Tuple

from bench import probe, series
from bench.peers.base import QUEUE, NotApplicable, Peer, stamped
from bench.tally import TALLY
from bench.timing import Sample, timed_once

TENANT = "bench-tenant"
WIRE = "bench.noop.v1"


@dataclass(frozen=True)
class BenchJob:
    n: int
    sent: float  # time.time() at enqueue for latency probes, 0.0 otherwise


@dataclass(frozen=True)
class SleepJob:
    n: int
    seconds: float


@dataclass(frozen=True)
class AsyncSleepJob:
    n: int
    seconds: float


def noop(job: BenchJob, ctx: Any) -> None:
    TALLY.begin()
    if job.sent:
        probe.hit(job.sent)
    TALLY.hit()


def sleep(job: SleepJob, ctx: Any) -> None:
    TALLY.begin()
    time.sleep(job.seconds)
    TALLY.hit()


async def async_sleep(job: AsyncSleepJob, ctx: Any) -> None:
    TALLY.begin()
    await asyncio.sleep(job.seconds)
    TALLY.hit()


class CaravelPeer(Peer):
    name = "caravel_lite"
    kinds = ("sqlite", "postgres", "mysql")
    requires = ("caravel_lite",)

    def open(self) -> None:
        import caravel_lite as cl

        overrides = {}
        if self.target.kind == "sqlite":
            overrides = {"pragmas": self.target.sqlite_pragmas}
        self.cl = cl
        self.db = cl.open_database(self.target.url, **overrides)
        self.db.connect(reuse_if_open=True)
        registry = cl.JobRegistry()
        registry.register(WIRE, BenchJob, noop)
        registry.register("bench.sleep.v1", SleepJob, sleep)
        registry.register("bench.async-sleep.v1", AsyncSleepJob, async_sleep)
        self.queue = cl.DatabaseQueue(self.db, registry)
        self.dispatch = cl.Dispatch(queue=QUEUE, tenant_id=TENANT)

    def install(self) -> None:
        self.cl.migrate(self.db)

    def close(self) -> None:
        if not self.db.is_closed():
            self.db.close()

    def enqueue_one(self, i: int) -> None:
        self.queue.enqueue(BenchJob(i, 0.0), self.dispatch)

    def enqueue_one_keyed(self, i: int) -> None:
        """``enqueue`` with a ``Dispatch`` carrying a key of its own, built in the call
        as a caller builds it."""
        self.queue.enqueue(BenchJob(i, 0.0), self.cl.Dispatch(
            queue=QUEUE, tenant_id=TENANT, idempotency_key=f"bench-key-{i}"))

    def enqueue_bulk(self, n: int) -> Sample:
        """``DatabaseQueue.enqueue_many``: one call, one transaction, multi-row INSERTs
        (validation and idempotency as for ``enqueue``)."""
        many = getattr(self.queue, "enqueue_many", None)
        if many is None:
            raise NotApplicable("not implemented")
        items = [(BenchJob(i, 0.0), self.dispatch) for i in range(n)]
        return timed_once(lambda: many(items), n)

    def prefill(self, n: int) -> None:
        self.queue.enqueue_many([(BenchJob(i, 0.0), self.dispatch) for i in range(n)])

    def enqueue_stamped(self) -> None:
        self.queue.enqueue(BenchJob(1, stamped()), self.dispatch)

    def enqueue_batch_stamped(self, n: int, sent: float) -> None:
        self.queue.enqueue_batch([(BenchJob(i, 0.0), self.dispatch) for i in range(n)],
                                 on_complete=(BenchJob(n, sent), self.dispatch))

    def enqueue_chain_stamped(self, n: int, sent: float) -> None:
        self.queue.enqueue_chain([(BenchJob(i, sent if i == n - 1 else 0.0), self.dispatch)
                                  for i in range(n)])

    def claim_timed(self) -> float:
        started = time.perf_counter()
        lease = self.queue.claim(QUEUE)
        elapsed = time.perf_counter() - started
        if lease is None or not self.queue.complete(lease):
            raise RuntimeError("caravel_lite: nothing claimed from a non-empty queue")
        return elapsed

    def claim_one(self) -> None:
        lease = self.queue.claim(QUEUE)
        if lease is None or not self.queue.complete(lease):
            raise RuntimeError("caravel_lite: nothing claimed from a non-empty queue")

    HISTORY_CHUNK = 1_000_000  # rows per INSERT ... SELECT

    def add_history(self, n: int, budget: Optional[float] = None) -> int:
        """n COMPLETED rows in the benchmark's own queue, by raw INSERT ... SELECT of a
        million rows at a time, then the tables analysed. With ``budget`` (seconds) no
        new chunk starts once it is spent; returns the rows inserted."""
        kind = self.target.kind
        ident = series.concat(kind, "'history-'", series.padded(kind, "n"))
        started = time.monotonic()
        done = 0
        while done < n and (budget is None or time.monotonic() - started < budget):
            last = min(n, done + self.HISTORY_CHUNK)
            self.db.execute_sql(
                "INSERT INTO caravel_jobs (id, queue, tenant_id, wire_name, payload, "
                "priority, available_at, max_attempts, state, enqueued_at, attempts, "
                "renewals, replay_count, updated_at, finished_at, claimed_at) "
                f"SELECT {ident}, '{QUEUE}', '{TENANT}', '{WIRE}', "
                "'{\"n\":0,\"sent\":0.0}', 2, 1000 + n, 3, 'completed', 1000 + n, 1, 0, 0, "
                f"1000 + n, 1000 + n, 1000 + n FROM {series.series(kind, last, done + 1)}")
            done = last
        self.analyze()
        return done

    def analyze(self) -> None:
        """Refresh the planner's statistics of the jobs table (autovacuum's job on
        PostgreSQL, InnoDB's own on MariaDB; nothing does it on SQLite)."""
        kind = self.target.kind
        if kind == "postgres":
            self.db.execute_sql("ANALYZE caravel_jobs")
        elif kind == "mysql":
            self.db.execute_sql("ANALYZE TABLE caravel_jobs")
        else:
            self.db.execute_sql("ANALYZE")

    def drain(self) -> int:
        done = 0
        misses = 0
        while misses < 2:  # a lost race can return None once while jobs remain
            lease = self.queue.claim(QUEUE)
            if lease is None:
                misses += 1
                continue
            misses = 0
            done += self.queue.complete(lease)
        return done

    def drain_run_once(self, budget: Optional[float] = None, **settings: Any) -> int:
        """A cron script's loop: ``QueueWorker(queue).run_once(queue)`` until it finds
        nothing, then ``close()`` (which writes what a prefetching worker batched)."""
        from caravel_lite.worker import QueueWorker

        end = None if budget is None else time.perf_counter() + budget
        worker = QueueWorker(self.queue, **settings)
        done = misses = 0
        while misses < 2 and (end is None or time.perf_counter() < end):
            if worker.run_once(QUEUE):  # a lost race can return False once while jobs remain
                done += 1
                misses = 0
            else:
                misses += 1
        worker.close()
        return done

    def serve(self, stop: Any) -> None:
        from caravel_lite.worker import QueueWorker

        QueueWorker(self.queue).run(QUEUE, stop=stop)  # default settings

    def _run_worker(self, expected: int, **settings: Any) -> int:
        from caravel_lite.worker import QueueWorker

        stop = threading.Event()
        TALLY.arm(expected, stop.set)
        QueueWorker(self.queue, **settings).run(QUEUE, stop=stop)
        self.last_done = TALLY.last_done
        return TALLY.done

    def drain_default(self, expected: int) -> int:
        """``QueueWorker(queue).run(...)``: no setting given, until ``expected`` ran."""
        return self._run_worker(expected)

    # -- concurrency -----------------------------------------------------------------
    sleep_type: Any = SleepJob  # the async variant enqueues AsyncSleepJob

    def check_concurrency(self) -> None:
        from caravel_lite.worker import QueueWorker

        if "concurrency" not in inspect.signature(QueueWorker).parameters:
            raise NotApplicable("not implemented (QueueWorker has no concurrency)")

    def prefill_sleep(self, n: int, seconds: float) -> None:
        self.queue.enqueue_many([(self.sleep_type(i, seconds), self.dispatch)
                                 for i in range(n)])

    def drain_sleep(self, expected: int, concurrency: int) -> int:
        """``QueueWorker(queue, concurrency=N)``, its other settings left alone."""
        return self._run_worker(expected, concurrency=concurrency)

    # -- prune -----------------------------------------------------------------------
    def prune_finished(self) -> Tuple[int, str]:
        """Remove every job that finished more than a day ago; (rows, which call)."""
        admin_type = getattr(self.cl, "QueueAdmin", None)  # the operators' object
        if admin_type is not None:
            try:
                admin = admin_type(self.db)
            except TypeError:
                admin = None
            if admin is not None and hasattr(admin, "prune"):
                return admin.prune(older_than=timedelta(days=1)), "QueueAdmin(db).prune"
        return self.queue.prune(older_than=timedelta(days=1)), "DatabaseQueue.prune"
