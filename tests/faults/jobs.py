"""The fault suite's job, its recording handler and the audit that reads the records.

Every execution of a ``Work`` job inserts a row into ``fault_runs`` (job id, attempt,
pid, start and finish in microseconds of the wall clock, outcome). The effect is a row
of ``fault_effects`` keyed by job id, written in the handler's own transaction after
checking that it is not there yet, so a re-run after a crash finds its own effect and
adds nothing; two runs overlapping in time would collide on the primary key and be
recorded as a ``conflict``. Both tables are created by the tests, never by migrations.

Child processes (``tests.faults.child`` or the command-line worker) find the database
for the handler in CARAVEL_FAULT_URL; in-process tests call :func:`use_database`.
"""
from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional

import peewee

from caravel_lite import JobContext, JobRegistry
from caravel_lite.dialect import dialect_of, open_database

QUEUE = "faults"
TENANT = "tenant-f"
WIRE_NAME = "faults.work.v1"

RUNS = "fault_runs"
EFFECTS = "fault_effects"
# Effects of ``Tally`` jobs: written in ctx.transaction() with no check at all (no key,
# no read first); a job whose effect landed twice shows as two rows.
TALLIES = "fault_tallies"
TALLY_WIRE_NAME = "faults.tally.v1"


@dataclass(frozen=True)
class Work:
    n: int
    crash: bool = False      # the handler kills its own process on every attempt
    work_ms: int = 0         # time spent "working" before the effect is written


registry = JobRegistry()
_handler_db: Dict[str, peewee.Database] = {}
_phase: Dict[str, int] = {}


def use_database(db: Optional[peewee.Database]) -> None:
    """The database the handler writes its records to (None: from CARAVEL_FAULT_URL)."""
    _handler_db.clear()
    if db is not None:
        _handler_db["db"] = db


def handler_database() -> peewee.Database:
    if "db" not in _handler_db:
        _handler_db["db"] = open_database(os.environ["CARAVEL_FAULT_URL"])
    return _handler_db["db"]


def set_phase_file(path: Optional[str]) -> None:
    if path is not None:
        _phase["fd"] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def phase(name: str) -> None:
    """Record where this process is (read by the kill loop); a plain overwrite that a
    SIGKILL cannot tear in a way that matters (the page cache keeps it)."""
    fd = _phase.get("fd")
    if fd is not None:
        os.pwrite(fd, name.ljust(16).encode(), 0)


def now_us() -> int:
    return time.time_ns() // 1000


@registry.job(WIRE_NAME, Work)
def run_work(job: Work, ctx: JobContext) -> None:
    db = handler_database()
    phase("handler")
    if job.crash:
        os.kill(os.getpid(), signal.SIGKILL)
    run_id = str(uuid.uuid4())
    job_id = str(ctx.job_id)
    db.execute_sql(f"INSERT INTO {RUNS} (run_id, job_id, attempt, pid, started_us) "
                   f"VALUES ({db.param}, {db.param}, {db.param}, {db.param}, {db.param})",
                   (run_id, job_id, ctx.attempt, os.getpid(), now_us()))
    if job.work_ms:
        time.sleep(job.work_ms / 1000)
    outcome = "found"
    try:
        with dialect_of(db).write_transaction(db):
            found = db.execute_sql(f"SELECT n FROM {EFFECTS} WHERE job_id = {db.param}",
                                   (job_id,)).fetchone()
            if found is None:
                db.execute_sql(f"INSERT INTO {EFFECTS} (job_id, n, attempt, pid, applied_us) "
                               f"VALUES ({db.param}, {db.param}, {db.param}, {db.param}, "
                               f"{db.param})", (job_id, job.n, ctx.attempt, os.getpid(), now_us()))
                outcome = "applied"
            elif found[0] != job.n:
                outcome = "mismatch"
    except peewee.IntegrityError:
        outcome = "conflict"  # another execution of this job wrote it concurrently
    phase("committed")
    db.execute_sql(f"UPDATE {RUNS} SET finished_us = {db.param}, outcome = {db.param} "
                   f"WHERE run_id = {db.param}", (now_us(), outcome, run_id))
    if outcome in ("conflict", "mismatch"):
        raise RuntimeError(f"job {job_id}: effect {outcome}")


@dataclass(frozen=True)
class Tally:
    n: int
    work_ms: int = 0


@registry.job(TALLY_WIRE_NAME, Tally)
def run_tally(job: Tally, ctx: JobContext) -> None:
    """Exactly once through ctx.transaction(): the effect and the completion commit
    together, so nothing here checks whether an earlier run wrote it."""
    phase("handler")
    with ctx.transaction() as db:
        db.execute_sql(f"INSERT INTO {TALLIES} (job_id, n, attempt, pid, applied_us) "
                       f"VALUES ({db.param}, {db.param}, {db.param}, {db.param}, {db.param})",
                       (str(ctx.job_id), job.n, ctx.attempt, os.getpid(), now_us()))
        if job.work_ms:
            time.sleep(job.work_ms / 1000)  # widen the window a kill can land in
    phase("committed")


def tallies(db: peewee.Database) -> Dict[str, int]:
    """Tally rows per job id."""
    return dict(db.execute_sql(f"SELECT job_id, COUNT(*) FROM {TALLIES} "
                               f"GROUP BY job_id").fetchall())


def create_tables(db: peewee.Database) -> None:
    drop_tables(db)
    db.execute_sql(f"CREATE TABLE {RUNS} (run_id VARCHAR(36) PRIMARY KEY, "
                   "job_id VARCHAR(36) NOT NULL, attempt INTEGER NOT NULL, pid INTEGER NOT NULL, "
                   "started_us BIGINT NOT NULL, finished_us BIGINT NULL, outcome VARCHAR(16) NULL)")
    db.execute_sql(f"CREATE TABLE {EFFECTS} (job_id VARCHAR(36) PRIMARY KEY, n BIGINT NOT NULL, "
                   "attempt INTEGER NOT NULL, pid INTEGER NOT NULL, applied_us BIGINT NOT NULL)")
    db.execute_sql(f"CREATE TABLE {TALLIES} (job_id VARCHAR(36) NOT NULL, n BIGINT NOT NULL, "
                   "attempt INTEGER NOT NULL, pid INTEGER NOT NULL, applied_us BIGINT NOT NULL)")


def drop_tables(db: peewee.Database) -> None:
    for table in (RUNS, EFFECTS, TALLIES):
        db.execute_sql(f"DROP TABLE IF EXISTS {table}")


@dataclass
class Audit:
    """What the records say about a set of jobs the callers were told were accepted."""

    accepted: int
    completed: int = 0
    executions: int = 0
    lost: List[str] = field(default_factory=list)          # accepted, not done once
    double_applied: List[str] = field(default_factory=list)  # >1 effect or a collision
    overlapping: List[str] = field(default_factory=list)  # two runs of one job at once
    stuck: List[str] = field(default_factory=list)         # still LEASED or PENDING
    unexpected: List[str] = field(default_factory=list)    # effect of a job never accepted
    rerun: int = 0                                         # executions beyond the first

    def assert_clean(self) -> None:
        assert not self.lost, f"{len(self.lost)} accepted job(s) lost: {self.lost[:5]}"
        assert not self.double_applied, f"double-applied: {self.double_applied[:5]}"
        assert not self.overlapping, f"overlapping executions: {self.overlapping[:5]}"
        assert not self.stuck, f"stuck jobs: {self.stuck[:5]}"


def audit(db: peewee.Database, accepted: Iterable[str],
          effects_expected: bool = True) -> Audit:
    """Every accepted job COMPLETED with exactly one effect; no two runs overlap."""
    accepted = set(accepted)
    result = Audit(len(accepted))
    states = dict(db.execute_sql("SELECT id, state FROM caravel_jobs WHERE queue = "
                                 f"{db.param}", (QUEUE,)).fetchall())
    effects: Dict[str, int] = {}
    for (job_id,) in db.execute_sql(f"SELECT job_id FROM {EFFECTS}").fetchall():
        effects[job_id] = effects.get(job_id, 0) + 1
    runs: Dict[str, list] = {}
    for job_id, started, finished, outcome in db.execute_sql(
            f"SELECT job_id, started_us, finished_us, outcome FROM {RUNS}").fetchall():
        runs.setdefault(job_id, []).append((started, finished, outcome))
    result.executions = sum(len(r) for r in runs.values())
    for job_id in sorted(accepted):
        state = states.get(job_id)
        if state == "completed":
            result.completed += 1
        if state in ("leased", "pending"):
            result.stuck.append(job_id)
        if state != "completed" or (effects_expected and effects.get(job_id, 0) != 1):
            result.lost.append(job_id)
    for job_id, count in effects.items():
        if count > 1:
            result.double_applied.append(job_id)
        if job_id not in states:
            result.unexpected.append(job_id)
    for job_id, job_runs in runs.items():
        result.rerun += len(job_runs) - 1
        if any(outcome == "conflict" for _, _, outcome in job_runs):
            result.double_applied.append(job_id)
        ordered = sorted(job_runs)
        for (s1, f1, _), (s2, _, _) in zip(ordered, ordered[1:]):
            if f1 is not None and s2 < f1:
                result.overlapping.append(job_id)
    return result
