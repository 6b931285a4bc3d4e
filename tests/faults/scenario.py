"""Shared steps of the process-based scenarios: start workers and enqueuers, drain,
collect the children's summaries and audit the records."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List, Sequence

import peewee

from tests.faults import jobs
from tests.faults.procs import Children
from tests.support import wait_for


def open_jobs(db: peewee.Database, ids: Sequence[str]) -> int:
    """How many of ``ids`` are not finished yet."""
    rows = db.execute_sql("SELECT id FROM caravel_jobs WHERE queue = "
                          f"{db.param} AND state IN ('pending', 'leased')",
                          (jobs.QUEUE,)).fetchall()
    return len({r[0] for r in rows} & set(ids))


@dataclass
class LoadResult:
    accepted: List[str] = field(default_factory=list)
    caller_errors: List[str] = field(default_factory=list)
    transient_retries: int = 0
    worker_exit_codes: List[int] = field(default_factory=list)
    seconds: float = 0.0
    drained: bool = False

    def problems(self, result: "jobs.Audit") -> List[str]:
        """Everything that makes the run a failure (empty when it is clean)."""
        found = []
        if not self.accepted:
            found.append("the enqueuers accepted nothing")
        if self.caller_errors:
            found.append(f"{len(self.caller_errors)} error(s) reached a caller, e.g. "
                         f"{self.caller_errors[0]}")
        if any(code != 0 for code in self.worker_exit_codes):
            found.append(f"worker exit codes {self.worker_exit_codes}")
        if not self.drained:
            found.append("the workers did not drain the queue")
        for name in ("lost", "double_applied", "overlapping", "stuck"):
            if getattr(result, name):
                found.append(f"{len(getattr(result, name))} job(s) {name}")
        return found


def run_load(children: Children, url: str, *, workers: int, enqueuers: int,
             seconds: float, worker_args: Sequence[str] = (),
             enqueue_args: Sequence[str] = (), db: peewee.Database,
             drain_timeout: float = 60) -> LoadResult:
    """Workers and enqueuers together for ``seconds``; then wait until every accepted
    job is finished (or the drain times out) and stop the workers with SIGTERM."""
    started = time.monotonic()
    worker_children = [children.start(["worker", "--url", url, *worker_args])
                       for _ in range(workers)]
    enqueuer_children = [children.start(["enqueue", "--url", url, "--prefix", f"e{i}",
                                         *enqueue_args]) for i in range(enqueuers)]
    everyone = enqueuer_children + worker_children
    # The fixed period starts once every child handles SIGTERM (imports take a while
    # when ten processes start at once on two cores). A child that died meanwhile (a
    # worker without the retry, on its first lock conflict) does not cut this wait
    # short for the others: an enqueuer still starting would not survive the SIGTERM
    # that ends the period.
    wait_for(lambda: all(c.stoppable() for c in everyone), timeout=60, interval=0.05,
             message="the children to start")
    deadline = time.monotonic() + seconds
    # The enqueuers run for a fixed time; wait on it (failing early if one dies).
    wait_for(lambda: time.monotonic() >= deadline or any(
        c.popen.poll() is not None for c in enqueuer_children + worker_children),
        timeout=seconds + 5, interval=0.05, message="the load period")
    children.terminate(enqueuer_children)
    result = LoadResult()
    for child in enqueuer_children:
        summary = child.summary()
        assert child.popen.returncode == 0 and summary, (
            f"enqueuer exited {child.popen.returncode}: {child.stderr()[-2000:]}")
        result.accepted += summary["accepted"]
        result.caller_errors += summary["errors"]
        result.transient_retries += summary["transient_retries"]
    try:
        wait_for(lambda: open_jobs(db, result.accepted) == 0 or all(
            c.popen.poll() is not None for c in worker_children),
            timeout=drain_timeout, interval=0.05, message="workers to drain the queue")
        result.drained = open_jobs(db, result.accepted) == 0
    except AssertionError:
        result.drained = False
    finally:
        result.seconds = time.monotonic() - started
        children.terminate(worker_children)
    for child in worker_children:
        summary = child.summary()
        result.worker_exit_codes.append(child.popen.returncode)
        result.caller_errors += summary.get("errors", [f"worker exited "
                                                      f"{child.popen.returncode}: "
                                                      f"{child.stderr()[-500:]}"])
        result.transient_retries += summary.get("transient_retries", 0)
    return result
