"""One fault-injection run of the whole worker (issue #22), against the public API.

A run on a migrated database with an empty queue:

1. creates ``chaos_runs`` and enqueues ``initial_jobs`` jobs (sync and async);
2. for ``seconds``, keeps ``workers`` worker processes (:mod:`tests.chaos.worker`)
   running, each behind its own :class:`~tests.chaos.proxy.ChaosProxy` on PostgreSQL and
   MariaDB; on the seeded schedule (:mod:`tests.chaos.plan`) it stops one with a
   signal (SIGTERM, SIGINT, SIGINT twice, or SIGTERM/SIGINT to a worker that turns them
   into SystemExit/KeyboardInterrupt) and starts a new one, and injects a proxy fault
   (a reply dropped after the server ran the request, a connection reset, a black hole,
   refused connections) into one worker's or the enqueuer's path, or stalls the jobs
   table with a lock; meanwhile a thread enqueues more jobs through its own proxy;
3. lets the faults end, stops every worker with SIGTERM, then drains the queue with
   fresh workers connected directly (no faults, no signals) until every job is final;
4. audits the records (:mod:`tests.chaos.invariants`).

SQLite runs have no proxy: signals and handler faults only. The result says what was
injected and which invariants broke, with job ids; :func:`describe` renders it with
the seed, which reproduces the schedules (not the processes' timing).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from caravel_lite import DatabaseQueue, Dispatch, QueueOptions, open_database
from tests.chaos import invariants, jobs, workflows
from tests.chaos.fleet import Fleet, WorkerProcess
from tests.chaos.plan import Mode, Schedule, Stop
from tests.chaos.proxy import ChaosProxy
from tests.chaos.settings import Settings

__all__ = ["Settings", "RunResult", "run", "describe"]
FINAL_STATES = ("completed", "dead_letter")
DRAIN_ROTATION = 8.0
# How each server locks the jobs table against writes for a stall, and unlocks it.
TABLE_LOCKS = {"postgres": ("LOCK TABLE caravel_jobs IN EXCLUSIVE MODE", None),
               "mysql": ("LOCK TABLES caravel_jobs WRITE", "UNLOCK TABLES")}


@dataclass
class RunResult:
    backend: str
    seed: int
    seconds: float = 0.0
    jobs: int = 0
    completed: int = 0
    dead_lettered: int = 0
    runs: int = 0
    faults: Counter = field(default_factory=Counter)
    drops: Counter = field(default_factory=Counter)   # dropped replies by target
    stops: Counter = field(default_factory=Counter)
    behaviours: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)
    enqueued: int = 0
    workers_started: int = 0
    stale_claims: int = 0   # leases that reached a worker with under half their time
    frozen_claims: int = 0  # leases lost while the machine froze their worker
    stalled_claims: int = 0  # leases that ran out in or right after a stall
    interrupted_claims: int = 0  # attempts spent by a claim its dying worker never logged
    leased_after_stop: int = 0  # jobs leased once the chaos phase's workers stopped
    violations: Dict[str, List[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations


class _Enqueuer(threading.Thread):
    """Enqueues jobs at a steady rate until stopped; half carry an idempotency key
    (repeated after an error, which is safe), half none (never repeated: a second
    call would be a second job)."""

    def __init__(self, queue: DatabaseQueue, first_n: int, per_second: float,
                 proxy: Optional[ChaosProxy]) -> None:
        super().__init__(name="chaos-enqueuer", daemon=True)
        self.queue = queue
        self.proxy = proxy
        self.n = first_n
        self.pause = 1.0 / per_second if per_second > 0 else None
        self.stop = threading.Event()
        self.accepted: List[Tuple[str, bool, bool]] = []  # job id, keyed, already_enqueued
        self.errors: Counter = Counter()

    def run(self) -> None:
        if self.pause is None:
            return
        while not self.stop.wait(self.pause):
            self.n += 1
            keyed = self.n % 2 == 0
            for _ in range(5 if keyed else 1):
                try:
                    result = self.queue.enqueue(_job(self.n), _dispatch(self.n, keyed))
                except Exception as exc:  # an injected fault: counted, and not hidden
                    self.errors[type(exc).__name__] += 1
                    if self.stop.wait(0.2):
                        return
                    continue
                self.accepted.append((str(result.job_id), keyed, result.already_enqueued))
                break
        self.queue.db.close()


def _job(n: int) -> object:
    return jobs.AsyncWork(n) if n % 3 == 0 else jobs.SyncWork(n)


def _dispatch(n: int, keyed: bool) -> Dispatch:
    return Dispatch(queue=jobs.QUEUE, tenant_id=jobs.TENANT,
                    idempotency_key=f"job-{n}" if keyed else None,
                    concurrency_key=jobs.LIMITED_KEY if jobs.limited(n) else None)


class Run:
    """The processes, proxies and records of one run; see the module docstring."""

    def __init__(self, backend: str, url: str, seed: int, settings: Settings,
                 directory: Path) -> None:
        self.backend = backend
        self.url = url
        self.seed = seed
        self.settings = settings
        self.directory = directory
        self.schedule = Schedule(seed, settings.faults, settings.modes)
        self.faulty = backend != "sqlite"
        parts = urlsplit(url)
        self.server = (parts.hostname or "127.0.0.1", parts.port or 0)
        self.fleet = Fleet(url, seed, settings, self.schedule, directory)
        self.proxies: List[ChaosProxy] = []
        self.leased_after_stop: List[Tuple[str, int]] = []
        self.stalled_until = 0.0
        self.stalls: List[Tuple[float, float]] = []
        self.db = open_database(url)
        self.options = QueueOptions(lease_duration=timedelta(seconds=settings.lease),
                                    max_attempts=settings.max_attempts,
                                    concurrency_limit=jobs.KEY_LIMIT)

    # -- processes -------------------------------------------------------------------

    def _proxy(self) -> Optional[ChaosProxy]:
        if not self.faulty:
            return None
        proxy = ChaosProxy(self.server).start()
        self.proxies.append(proxy)
        return proxy

    def start_worker(self, mode: Mode, drain: bool = False) -> WorkerProcess:
        """A worker behind a proxy of its own (straight to the database to drain)."""
        return self.fleet.start(mode, None if drain else self._proxy(), drain)

    # -- faults ----------------------------------------------------------------------

    def inject(self, targets: List[ChaosProxy], enqueuer: Optional[ChaosProxy],
               result: RunResult) -> None:
        kind = self.schedule.fault()
        proxy = self.schedule.pick(targets)
        if kind == "drop_reply":
            label, match, after = self.schedule.drop_target(proxy is enqueuer)
            proxy.drop_reply(match, after, label)
        elif kind == "reset":
            proxy.reset(self.schedule.faults, every=self.schedule.faults.random() < 0.3)
        elif kind == "stall":
            # One at a time, a lease apart: back to back they would be one long
            # outage, which no worker can be asked to ride out without losing leases.
            seconds = self.schedule.stall()
            now = time.time()
            if now >= self.stalled_until + self.settings.lease:
                self.stalled_until = now + seconds
                self.stalls.append((now, now + seconds))
                threading.Thread(target=self._stall, args=(seconds,), daemon=True,
                                 name="chaos-stall").start()
                result.faults["stall"] += 1
        elif kind == "blackhole":
            proxy.blackhole(self.schedule.window())
        else:
            proxy.refuse(self.schedule.window())

    def _stall(self, seconds: float) -> None:
        """Hold a lock on the jobs table (not on chaos_runs) for ``seconds``."""
        lock, unlock = TABLE_LOCKS[self.backend]
        db = open_database(self.url)
        try:
            with db.connection_context():
                with db.atomic():
                    db.execute_sql(lock)
                    time.sleep(seconds)
                    if unlock:
                        db.execute_sql(unlock)
        except Exception:  # a stall that could not be set up is no fault of the worker
            pass
        finally:
            db.close()

    # -- the run ---------------------------------------------------------------------

    def prepare(self) -> int:
        with self.db.connection_context():
            jobs.create_table(self.db)
            queue = DatabaseQueue(self.db, jobs.registry, self.options)
            for n in range(1, self.settings.initial_jobs + 1):
                queue.enqueue(_job(n), _dispatch(n, keyed=n % 2 == 0))
            # (job 1 carries no concurrency key: the limited key passes few jobs a second)
            self.workflows = workflows.enqueue(queue, _job, _dispatch(1, keyed=False))
        return self.settings.initial_jobs

    def chaos(self, result: RunResult, enqueuer: _Enqueuer) -> None:
        s = self.settings
        for _ in range(s.workers):
            self.start_worker(self.schedule.mode())
        self.fleet.wait_ready(self.fleet.live())
        enqueuer.start()
        now = time.time()
        end = now + s.seconds
        next_stop = now + self.schedule.stop_gap()
        next_fault = now + self.schedule.fault_gap()
        while time.time() < end:
            self.fleet.reap()
            now = time.time()
            self.fleet.send_second_sigints(now)
            running = [w for w in self.fleet.live() if w.signalled_at is None]
            for _ in range(s.workers - len(running)):
                self.start_worker(self.schedule.mode())
            if now >= next_stop:
                ready = [w for w in running if w.ready()]
                if ready:
                    victim = self.schedule.pick(ready) if len(ready) > 1 else ready[0]
                    self.fleet.signal(victim, self.schedule.stop_for(victim.mode))
                next_stop = now + self.schedule.stop_gap()
            if self.faulty and now >= next_fault:
                # Only workers inside run(): what is under test is what run promises
                # (a fault while the process builds its queue ends it, as it would
                # end any program that cannot reach its database yet).
                targets = [w.proxy for w in self.fleet.live() if w.proxy is not None and w.ready()]
                if enqueuer.proxy is not None:
                    targets.append(enqueuer.proxy)
                if targets:
                    self.inject(targets, enqueuer.proxy, result)
                next_fault = now + self.schedule.fault_gap()
            time.sleep(0.02)
        enqueuer.stop.set()
        enqueuer.join(30)
        # Let every window end before the last stops, so that they are clean stops of
        # workers that can reach their database.
        ends = [window.end for proxy in self.proxies for window in proxy.windows]
        while ends and time.time() < max(ends) + 0.5:
            self.fleet.reap()
            self.fleet.send_second_sigints(time.time())
            time.sleep(0.02)
        self.fleet.stop_all(self.fleet.live())
        self.leased_after_stop = self._leased()

    def _leased(self) -> List[Tuple[str, int]]:
        """The jobs leased once every worker of the chaos phase has stopped: the
        leases no live worker holds (job id, attempt)."""
        p = self.db.param
        with self.db.connection_context():
            return [(row[0], int(row[1])) for row in self.db.execute_sql(
                f"SELECT id, attempts FROM caravel_jobs WHERE queue = {p} AND state = {p}",
                (jobs.QUEUE, "leased")).fetchall()]

    def drain(self) -> bool:
        """Fresh workers, straight to the database, until every job is final."""
        drainers = [self.start_worker(Mode.HANDLE_SIGNALS, drain=True)
                    for _ in range(self.settings.workers)]
        self.fleet.wait_ready(drainers)
        deadline = time.monotonic() + self.settings.drain_timeout
        rotate = time.monotonic() + DRAIN_ROTATION
        done = False
        while time.monotonic() < deadline:
            self.fleet.reap()
            self.fleet.send_second_sigints(time.time())
            if self._open_jobs() == 0:
                done = True
                break
            if time.monotonic() >= rotate:
                # A worker a handler wedged would hold its jobs to the end: the oldest
                # drainer is replaced now and then (a clean stop).
                rotate = time.monotonic() + DRAIN_ROTATION
                oldest = next(w for w in drainers if w.signalled_at is None)
                self.fleet.signal(oldest, Stop.SIGTERM)
                drainers.append(self.start_worker(Mode.HANDLE_SIGNALS, drain=True))
            time.sleep(0.2)
        self.fleet.stop_all(drainers)
        return done

    def _open_jobs(self) -> int:
        p = self.db.param
        with self.db.connection_context():
            row = self.db.execute_sql(
                f"SELECT COUNT(*) FROM caravel_jobs WHERE queue = {p} "
                f"AND state NOT IN ({p}, {p}, {p}, {p})",
                (jobs.QUEUE, *FINAL_STATES, *workflows.RESTING)).fetchone()
        return int(row[0])

    def execute(self) -> RunResult:
        result = RunResult(self.backend, self.seed)
        started = time.monotonic()
        enqueue_proxy = self._proxy()
        enqueue_db = open_database(enqueue_proxy.through(self.url) if enqueue_proxy
                                   else self.url)
        initial = self.prepare()
        enqueuer = _Enqueuer(DatabaseQueue(enqueue_db, jobs.registry, self.options),
                             initial, self.settings.enqueue_per_second, enqueue_proxy)
        try:
            self.chaos(result, enqueuer)
            self.drain()
        finally:
            self.fleet.kill_all()
            for proxy in self.proxies:
                proxy.close()
        result.seconds = time.monotonic() - started
        result.enqueued = initial + len(enqueuer.accepted)
        result.workers_started = len(self.fleet.workers)
        for proxy in self.proxies:
            result.faults.update(proxy.counts)
            result.drops.update(proxy.drops)
        for worker in self.fleet.workers:
            if worker.stop is not None and not worker.drain:
                result.stops[worker.stop.value] += 1
        with self.db.connection_context():
            evidence = invariants.Evidence.gather(self.db, self.fleet.workers, enqueuer.accepted,
                                                  self.settings, self.leased_after_stop,
                                                  self.stalls)
        result.violations = invariants.check(evidence)
        with self.db.connection_context():
            result.violations.update(workflows.check(self.db, self.workflows, evidence.jobs,
                                                     evidence.runs))
        invariants.summarise(evidence, result)
        with self.db.connection_context():
            jobs.drop_table(self.db)
        self.db.close()
        self.fleet.write(self.directory / "workers.json", self.stalls)
        return result



def run(backend: str, url: str, seed: int, settings: Settings, directory: Path) -> RunResult:
    """One run on ``url`` (migrated, with an empty ``chaos`` queue)."""
    directory.mkdir(parents=True, exist_ok=True)
    return Run(backend, url, seed, settings, directory).execute()


def describe(result: RunResult) -> str:
    """The run in a few lines: seed, what was injected, and each broken invariant with
    job ids (at most 10 of them)."""
    lines = [f"chaos run on {result.backend}, seed {result.seed}: {result.jobs} jobs, "
             f"{result.runs} handler runs, {result.workers_started} worker processes, "
             f"{result.seconds:.1f} s",
             "  faults: " + _counts(result.faults),
             "  replies dropped: " + _counts(result.drops),
             "  stops: " + _counts(result.stops),
             "  handler runs by outcome: " + _counts(result.outcomes),
             f"  leases that reached their worker with under half their time left: "
             f"{result.stale_claims}; lost while their worker was frozen: "
             f"{result.frozen_claims}, in or right after a stall: {result.stalled_claims}, "
             f"by a worker that died before logging its claim: {result.interrupted_claims}; "
             f"jobs leased when the workers had stopped: "
             f"{result.leased_after_stop}"]
    if not result.violations:
        lines.append("  invariants: all held")
    for name, items in sorted(result.violations.items()):
        lines.append(f"  VIOLATED {name} ({invariants.DESCRIPTIONS[name]}): {len(items)}")
        lines.extend(f"    {item}" for item in items[:10])
    lines.append(f"  reproduce the schedules with seed {result.seed}")
    return "\n".join(lines)


def _counts(counter: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(counter.items())) or "none"
