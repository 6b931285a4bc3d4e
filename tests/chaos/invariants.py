"""What a fault-injection run must leave behind, checked from three records that do
not depend on the worker under test telling the truth:

- the queue's own rows (``caravel_jobs``: state and attempts; ``caravel_failures``:
  one row per attempt that ended in ``fail()``);
- ``chaos_runs``, written by the handlers through their own connection;
- each worker process's log (:mod:`tests.chaos.worker`): the leases its claims
  returned, the handlers it started, the moment each handler returned or raised;
- and what the harness did: when it signalled each process, when that exited, and the
  windows in which a proxy fault stopped a process's traffic.

``attempts`` on a job counts its claims less the claims handed back unstarted
(``release`` gives the attempt back), so at the end attempt numbers 1..attempts were
each spent by the last claim that took that number; a completion leaves ``attempts``
at the attempt that completed it.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Set, Tuple

import peewee

from tests.chaos import jobs, workflows

if TYPE_CHECKING:
    from tests.chaos.fleet import WorkerProcess
    from tests.chaos.harness import RunResult
    from tests.chaos.settings import Settings

SECOND = 1_000_000  # microseconds
# Two runs of one job may overlap by this much: a lease that runs out is noticed by
# the supervisor within its 100 ms tick, the handler sees ctx.cancelled within its
# 20 ms poll (tests.chaos.jobs.POLL), and on a loaded 2-core machine threads wait for
# the CPU and the GIL; a worker that does not enforce the deadline at all overlaps by
# the length of the fault (seconds).
OVERLAP_TOLERANCE = SECOND // 2
# A handler that returned (or raised) at least this long before the signal that ended
# its worker abruptly is "before the stop": its log line is written right before the
# return; this leaves time for the signal's delivery and for the handler's thread to
# hand its result over on a loaded machine (five of Python's 5 ms switch intervals).
BEFORE_STOP = 25_000
# A handler that ends this close to its lease's lifetime (max_lease_lifetime from the
# claim) cannot be promised its acknowledgement: the write has to land before then.
LIFETIME_MARGIN = SECOND // 2
# A worker whose ticker (tests.chaos.worker.TICK, every 0.1 s) went silent this long
# was not running: a loaded machine gave the process no CPU. A lease that ran out in
# such a freeze could be neither started nor handed back by any worker, so what its
# loss leaves (an unstarted lease, an attempt spent) is excused there, and counted.
FROZEN = SECOND // 2
# A stall (the jobs table locked by another session) holds every worker's statements;
# a lease whose last moments fell in one, or within this long after it (the backlog of
# statements a stall leaves), could not be acknowledged or handed back in time however
# the worker behaved: excused, and counted.
AFTER_STALL = SECOND // 2

DESCRIPTIONS = {
    "unfinished": "every job reached a final state (completed or dead-lettered)",
    "completed_without_return": "no job completed without its handler having returned "
                                "in the attempt that completed it",
    "ran_concurrently": "no job's handler ran concurrently with itself",
    "orphaned_claim": "every attempt spent was a lease some worker's claim received "
                      "(none held by a token no worker held)",
    "returned_not_completed": "every job whose handler returned before its worker's "
                              "stop was completed in that attempt",
    "failure_not_recorded": "every handler that raised (Exception or BaseException) "
                            "before its worker's stop had that attempt's failure recorded",
    "claimed_never_started": "every lease a worker received was started or handed back "
                             "(unless it arrived with less than half its time left)",
    "attempt_ran_twice": "no attempt of a job ran twice (only unstarted leases are "
                         "handed back)",
    "enqueue_misreported": "a key-less enqueue is never reported as already enqueued",
    "enqueue_lost": "every enqueue that returned left its job in the table",
    "limit_exceeded": "no more handlers of the limited key ran at once than its limit "
                      "(a run past its lease's expiry counted until the tolerance)",
    "worker_exit": "a worker exits only when stopped, with the stop's exit code",
    "worker_hung": "a stopped worker exits within the exit timeout",
    "stop_waited_out": "a clean stop (SIGTERM, SIGINT) ends before the shutdown timeout, "
                       "every handler here ending within 0.3 s of ctx.cancelled",
    **workflows.DESCRIPTIONS,
}


@dataclass(frozen=True)
class RunRow:
    job_id: str
    n: int
    attempt: int
    pid: int
    behaviour: str
    started_us: int
    ended_us: Optional[int]
    outcome: Optional[str]
    cancelled: Optional[int]


@dataclass(frozen=True)
class Logged:
    pid: int
    at_us: int
    outcome: str = ""
    expires_us: int = 0  # a claim's: when the lease it returned expires


Key = Tuple[str, int]  # job id, attempt


@dataclass
class Evidence:
    settings: "Settings"
    workers: Dict[int, "WorkerProcess"]
    jobs: Dict[str, Tuple[str, int]]            # id -> state, attempts
    failures: Set[Key]
    runs: List[RunRow]
    claims: Dict[Key, List[Logged]] = field(default_factory=lambda: defaultdict(list))
    starts: Dict[Key, List[Logged]] = field(default_factory=lambda: defaultdict(list))
    ends: List[Tuple[Key, Logged]] = field(default_factory=list)
    accepted: List[Tuple[str, bool, bool]] = field(default_factory=list)
    stale_claims: int = 0  # leases that arrived with less than half their time left
    frozen_claims: int = 0  # leases lost while their worker was frozen (FROZEN)
    stalled_claims: int = 0  # leases that ran out in or right after a stall (AFTER_STALL)
    interrupted_claims: int = 0  # attempts spent by claims of workers that died abruptly
    stalls: List[Tuple[int, int]] = field(default_factory=list)  # (start, end) in us
    ticks: Dict[int, List[int]] = field(default_factory=lambda: defaultdict(list))
    # Leases left when every worker of the chaos phase had stopped (job id, attempt).
    leased_after_stop: Set[Key] = field(default_factory=set)

    @classmethod
    def gather(cls, db: peewee.Database, workers: Iterable["WorkerProcess"],
               accepted: List[Tuple[str, bool, bool]], settings: "Settings",
               leased_after_stop: Iterable[Key] = (),
               stalls: Iterable[Tuple[float, float]] = ()) -> "Evidence":
        p = db.param
        found = {row[0]: (row[1], int(row[2])) for row in db.execute_sql(
            f"SELECT id, state, attempts FROM caravel_jobs WHERE queue = {p}",
            (jobs.QUEUE,)).fetchall()}
        failures = {(row[0], int(row[1])) for row in db.execute_sql(
            f"SELECT job_id, attempt FROM caravel_failures WHERE queue = {p}",
            (jobs.QUEUE,)).fetchall()}
        runs = [RunRow(row[0], int(row[1]), int(row[2]), int(row[3]), row[4], int(row[5]),
                       None if row[6] is None else int(row[6]), row[7],
                       None if row[8] is None else int(row[8]))
                for row in db.execute_sql(
                    f"SELECT job_id, n, attempt, pid, behaviour, started_us, ended_us, "
                    f"outcome, cancelled FROM {jobs.RUNS}").fetchall()]
        evidence = cls(settings, {w.pid: w for w in workers}, found, failures, runs,
                       accepted=list(accepted), leased_after_stop=set(leased_after_stop),
                       stalls=[(int(a * SECOND), int(b * SECOND)) for a, b in stalls])
        for worker in evidence.workers.values():
            evidence._read_log(worker)
        return evidence

    def _read_log(self, worker: "WorkerProcess") -> None:
        try:
            text = worker.log.read_text(errors="replace")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            words = line.split()
            try:
                if len(words) == 5 and words[0] == "claim":
                    self.claims[(words[1], int(words[2]))].append(
                        Logged(worker.pid, int(words[3]), expires_us=int(words[4])))
                elif len(words) == 4 and words[0] == "start":
                    self.starts[(words[1], int(words[2]))].append(
                        Logged(worker.pid, int(words[3])))
                elif len(words) == 2 and words[0] == "tick":
                    self.ticks[worker.pid].append(int(words[1]))
                elif len(words) == 5 and words[0] == "end":
                    self.ends.append(((words[1], int(words[2])),
                                      Logged(worker.pid, int(words[4]), words[3])))
            except ValueError:  # a line cut short by the process's end
                continue

    # -- helpers ---------------------------------------------------------------------

    def exit_us(self, pid: int) -> int:
        worker = self.workers.get(pid)
        if worker is None or worker.exited_at is None:
            return 2 ** 62
        return int(worker.exited_at * SECOND)

    def abrupt_us(self, pid: int) -> Optional[int]:
        worker = self.workers.get(pid)
        if worker is None or worker.abrupt_at is None:
            return None
        return int(worker.abrupt_at * SECOND)

    def stalled(self, pid: int, start_us: int, end_us: int) -> bool:
        """Whether a fault stopped this worker's traffic at some time in the span."""
        worker = self.workers.get(pid)
        if worker is None:
            return False
        return any(w.overlaps(start_us / SECOND, end_us / SECOND) for w in worker.windows())

    def in_stall(self, start_us: int, end_us: int) -> bool:
        """Whether a stall, or the AFTER_STALL that follows it, overlaps the span."""
        return any(start < end_us and end + AFTER_STALL > start_us
                   for start, end in self.stalls)

    def died_abruptly(self, start_us: int, end_us: int) -> bool:
        """Whether some worker of the chaos phase ended in the span by an exit no clean
        stop gives (KeyboardInterrupt, death by a signal, killed): one that had a claim
        committed and not yet logged left its attempt spent, by design."""
        for worker in self.workers.values():
            if worker.exited_at is None or worker.drain:
                continue
            if worker.killed or worker.returncode not in (0, None):
                if start_us <= int(worker.exited_at * SECOND) <= end_us:
                    return True
        return False

    def cut_off(self, start_us: int, end_us: int, lease_us: int) -> bool:
        """Whether some worker of the chaos phase had its traffic stopped (a blackhole,
        refused connections) both when a claim could have been made in the span (up to
        ``end_us - lease_us``) and still at the span's end: its claim could commit with
        its answer held, and the hand-back of its rows by token wait, until their lease
        ran out. (A worker that gets through earlier hands them back: the worker's
        loop does so before its next claim.)"""
        return any(self.stalled(pid, start_us, end_us - lease_us)
                   and self.stalled(pid, end_us - SECOND // 2, end_us)
                   for pid, worker in self.workers.items() if not worker.drain)

    def frozen(self, pid: int, start_us: int, end_us: int) -> bool:
        """Whether ``pid``'s ticks stopped for FROZEN or longer at some time in the span
        (a process that wrote no tick at all is not judged frozen)."""
        ticks = self.ticks.get(pid)
        if not ticks:
            return False
        for before, after in zip(ticks, ticks[1:]):
            if after - before >= FROZEN and before < end_us and after > start_us:
                return True
        return False

    def claimed_us(self, key: Key, pid: int, before_us: int) -> Optional[int]:
        """When ``pid``'s claim of ``key`` that its run at ``before_us`` started from
        was made (the last such claim before the start)."""
        times = [c.at_us for c in self.claims.get(key, []) if c.pid == pid and c.at_us <= before_us]
        return max(times) if times else None

    def run_row(self, key: Key, pid: int) -> Optional[RunRow]:
        for row in self.runs:
            if (row.job_id, row.attempt) == key and row.pid == pid:
                return row
        return None


def _stop_text(evidence: Evidence, pid: int, at_us: int) -> str:
    worker = evidence.workers.get(pid)
    abrupt = evidence.abrupt_us(pid)
    if worker is None or abrupt is None or worker.stop is None:
        return f"worker {pid}"
    return (f"worker {pid} ({worker.mode.value}), {(abrupt - at_us) / SECOND:.3f} s "
            f"before its {worker.stop.value}")


def check(evidence: Evidence) -> Dict[str, List[str]]:
    """Each broken invariant (see DESCRIPTIONS) with one line per instance."""
    found: Dict[str, List[str]] = defaultdict(list)
    lease_us = int(evidence.settings.lease * SECOND)
    lifetime_us = int(evidence.settings.lifetime * SECOND)
    states = evidence.jobs

    for job_id, (state, attempts) in sorted(states.items()):
        # (held chain steps and ruled-out callbacks: tests.chaos.workflows checks them)
        if state not in ("completed", "dead_letter", *workflows.RESTING):
            found["unfinished"].append(f"job {job_id}: {state}, attempts {attempts}")

    returned = {(r.job_id, r.attempt) for r in evidence.runs if r.outcome == "returned"}
    for job_id, (state, attempts) in sorted(states.items()):
        if state == "completed" and (job_id, attempts) not in returned:
            found["completed_without_return"].append(
                f"job {job_id}: completed in attempt {attempts}, whose handler never returned")

    by_job: Dict[str, List[RunRow]] = defaultdict(list)
    for row in evidence.runs:
        by_job[row.job_id].append(row)
    for job_id, rows in sorted(by_job.items()):
        rows.sort(key=lambda r: r.started_us)
        latest: Optional[RunRow] = None
        latest_end = 0
        for row in rows:
            if latest is not None and row.started_us + OVERLAP_TOLERANCE < latest_end:
                found["ran_concurrently"].append(
                    f"job {job_id}: attempt {row.attempt} (worker {row.pid}) started "
                    f"{(latest_end - row.started_us) / SECOND:.2f} s before attempt "
                    f"{latest.attempt} (worker {latest.pid}, {latest.behaviour}, "
                    f"{latest.outcome or 'no end'}) ended")
            end = row.ended_us if row.ended_us is not None else evidence.exit_us(row.pid)
            if end > latest_end:
                latest, latest_end = row, end

    for job_id, (state, attempts) in sorted(states.items()):
        for k in range(1, attempts + 1):
            if (job_id, k) not in evidence.claims:
                later = [c.at_us for c in evidence.claims.get((job_id, k + 1), [])]
                if later:
                    # The lost claim's lease ran out before the next claim of the job:
                    # it was made at most a lease (never renewed: never started) and
                    # the sweep's margin earlier.
                    next_us = min(later)
                    if evidence.died_abruptly(next_us - lease_us - SECOND, next_us):
                        evidence.interrupted_claims += 1
                        continue
                    if evidence.cut_off(next_us - lease_us - SECOND, next_us, lease_us):
                        evidence.stalled_claims += 1
                        continue
                still = (", still leased when every worker had stopped"
                         if (job_id, k) in evidence.leased_after_stop else "")
                found["orphaned_claim"].append(
                    f"job {job_id}: attempt {k} was spent by a claim no worker received "
                    f"(now {state}, attempts {attempts}{still})")

    for key, logged in evidence.ends:
        worker = evidence.workers.get(logged.pid)
        if worker is not None and worker.killed:
            continue  # reported as worker_hung
        abrupt = evidence.abrupt_us(logged.pid)
        if abrupt is not None and logged.at_us > abrupt - BEFORE_STOP:
            continue
        record = evidence.run_row(key, logged.pid)
        started = record.started_us if record is not None else logged.at_us - lease_us
        if evidence.stalled(logged.pid, started, logged.at_us + lease_us) \
                or evidence.frozen(logged.pid, started, logged.at_us + lease_us):
            continue
        if evidence.in_stall(logged.at_us, logged.at_us + SECOND // 10):
            evidence.stalled_claims += 1  # its acknowledgement met the stall
            continue
        claimed = evidence.claimed_us(key, logged.pid, started)
        if claimed is not None and logged.at_us > claimed + lifetime_us - LIFETIME_MARGIN:
            continue  # ended so close to its lease's lifetime that no write could make it
        state, attempts = states.get(key[0], ("missing", 0))
        if logged.outcome == "returned":
            if state != "completed" or attempts != key[1]:
                found["returned_not_completed"].append(
                    f"job {key[0]} attempt {key[1]}: returned on "
                    f"{_stop_text(evidence, logged.pid, logged.at_us)}; "
                    f"now {state}, attempts {attempts}")
        elif logged.outcome in ("raised", "system_exit", "keyboard_interrupt"):
            if record is not None and record.cancelled:
                continue  # raised after the worker told it to stop: left leased by design
            if key not in evidence.failures and not (state == "dead_letter"
                                                     and attempts == key[1]):
                found["failure_not_recorded"].append(
                    f"job {key[0]} attempt {key[1]}: raised {logged.outcome} on "
                    f"{_stop_text(evidence, logged.pid, logged.at_us)}; no failure recorded "
                    f"(now {state}, attempts {attempts})")

    for key, claims in sorted(evidence.claims.items()):
        state, attempts = states.get(key[0], ("missing", 0))
        if key[1] > attempts:
            continue  # handed back (the attempt was given back)
        last = max(claims, key=lambda c: c.at_us)
        worker = evidence.workers.get(last.pid)
        if worker is not None and worker.killed:
            continue
        if any(s.pid == last.pid and s.at_us >= last.at_us for s in evidence.starts.get(key, [])):
            continue
        if evidence.stalled(last.pid, last.at_us, last.at_us + lease_us):
            continue
        if evidence.frozen(last.pid, last.at_us, last.expires_us):
            evidence.frozen_claims += 1
            continue
        if evidence.in_stall(last.expires_us - lease_us // 2, last.expires_us):
            evidence.stalled_claims += 1
            continue
        if last.expires_us - last.at_us < lease_us // 2:
            # The claim reached the worker with less than half its lease left (held up
            # on the way): never started, by the rule, and too late to hand back.
            evidence.stale_claims += 1
            continue
        found["claimed_never_started"].append(
            f"job {key[0]} attempt {key[1]}: leased to worker {last.pid}, never started "
            f"there nor handed back (now {state}, attempts {attempts})")

    _check_limit(evidence, found)

    per_attempt = Counter((r.job_id, r.attempt) for r in evidence.runs)
    for (job_id, attempt), count in sorted(per_attempt.items()):
        if count > 1:
            found["attempt_ran_twice"].append(f"job {job_id}: attempt {attempt} ran {count} times")

    for job_id, keyed, already in evidence.accepted:
        if already and not keyed:
            found["enqueue_misreported"].append(
                f"job {job_id}: a key-less enqueue answered already_enqueued=True")
        if job_id not in states:
            found["enqueue_lost"].append(f"job {job_id}: enqueue returned, no row")

    for worker in evidence.workers.values():
        _check_exit(evidence, worker, found)
        _check_stop_time(evidence, worker, found)
    return dict(found)


def _check_limit(evidence: Evidence, found: Dict[str, List[str]]) -> None:
    """At most KEY_LIMIT runs of the limited key at any instant. A slot frees when its
    lease expires, while the handler may run on until it notices: each run counts
    until its end less OVERLAP_TOLERANCE (as ran_concurrently allows one job)."""
    events: List[Tuple[int, int, RunRow]] = []
    for row in evidence.runs:
        # The key is on the enqueuer's limited jobs only: the workflows' jobs (numbered
        # from FIRST_N, some of them multiples of ten too) are dispatched without it.
        if not jobs.limited(row.n) or row.n >= workflows.FIRST_N:
            continue
        end = row.ended_us if row.ended_us is not None else evidence.exit_us(row.pid)
        end -= OVERLAP_TOLERANCE
        if end > row.started_us:  # shorter runs are within the tolerance throughout
            events += [(row.started_us, 1, row), (end, -1, row)]
    running: List[RunRow] = []
    for _, step, row in sorted(events, key=lambda e: (e[0], e[1])):
        if step < 0:
            running.remove(row)
            continue
        running.append(row)
        if len(running) > jobs.KEY_LIMIT:
            found["limit_exceeded"].append(
                "jobs " + ", ".join(f"{r.job_id} (attempt {r.attempt}, worker {r.pid})"
                                    for r in running) + " ran at once")


def _check_stop_time(evidence: Evidence, worker: "WorkerProcess",
                     found: Dict[str, List[str]]) -> None:
    if (worker.stop is None or worker.stop.value not in ("sigterm", "sigint")
            or worker.signalled_at is None or worker.exited_at is None or worker.killed):
        return
    took = worker.exited_at - worker.signalled_at
    if took < evidence.settings.shutdown_timeout:
        return
    if evidence.stalled(worker.pid, int(worker.signalled_at * SECOND),
                        int(worker.exited_at * SECOND)):
        return  # a fault held up its last writes
    found["stop_waited_out"].append(
        f"worker {worker.pid} ({worker.mode.value}) took {took:.2f} s to stop after its "
        f"{worker.stop.value} (shutdown timeout {evidence.settings.shutdown_timeout:g} s)")


# SIGINT twice: 130 from the KeyboardInterrupt, 0 when the clean stop was done first,
# -2 when the second SIGINT found the process already past its handlers, exiting.
EXPECTED_CODES = {"sigterm": {0}, "sigint": {0}, "sigint_twice": {0, 130, -2},
                  "sigterm_exit": {0}, "sigint_raise": {130}}


def _check_exit(evidence: Evidence, worker: "WorkerProcess",
                found: Dict[str, List[str]]) -> None:
    stop = worker.stop.value if worker.stop is not None else "stop"
    if worker.killed:
        found["worker_hung"].append(f"worker {worker.pid} ({worker.mode.value}) had not "
                                    f"exited within the exit timeout after its {stop}; killed")
        return
    unasked = worker.signalled_at is None or (worker.exited_at is not None
                                              and worker.exited_at < worker.signalled_at)
    expected = EXPECTED_CODES[worker.stop.value] if worker.stop is not None else set()
    if (not unasked and worker.returncode == 1 and worker.exited_at is not None
            and worker.signalled_at is not None
            and evidence.stalled(worker.pid, int((worker.signalled_at - 1) * SECOND),
                                 int(worker.exited_at * SECOND))):
        return  # its last writes met a black hole or a refusal: a fault, said with exit 1
    if unasked or worker.returncode not in expected:
        tail = worker.stderr.read_text(errors="replace").strip().splitlines()[-1:] \
            if worker.stderr.exists() else []
        found["worker_exit"].append(
            f"worker {worker.pid} ({worker.mode.value}) exited {worker.returncode} "
            f"{'unasked' if unasked else 'after its ' + stop}"
            f"{': ' + tail[0] if tail else ''}")


def summarise(evidence: Evidence, result: "RunResult") -> None:
    """The run's figures: jobs, their final states, handler runs by plan and outcome."""
    result.jobs = len(evidence.jobs)
    result.completed = sum(1 for s, _ in evidence.jobs.values() if s == "completed")
    result.dead_lettered = sum(1 for s, _ in evidence.jobs.values() if s == "dead_letter")
    result.runs = len(evidence.runs)
    result.behaviours.update(r.behaviour for r in evidence.runs)
    result.outcomes.update(r.outcome or "no end" for r in evidence.runs)
    result.stale_claims = evidence.stale_claims
    result.frozen_claims = evidence.frozen_claims
    result.stalled_claims = evidence.stalled_claims
    result.interrupted_claims = evidence.interrupted_claims
    result.leased_after_stop = len(evidence.leased_after_stop)
