"""The audit's own rules (tests.chaos.invariants), on hand-made evidence: a lease lost
while its worker was frozen is excused and counted, one lost while it ran is not."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

from tests.chaos import invariants
from tests.chaos.fleet import WorkerProcess
from tests.chaos.plan import Mode
from tests.chaos.invariants import SECOND, Evidence, Logged
from tests.chaos.settings import Settings

PID = 4242
JOB = "01a2356a-7e69-7001-9d41-cb16f9457744"


def _evidence(ticks_us) -> Evidence:
    evidence = Evidence(Settings(), {}, {JOB: ("completed", 2)}, set(), [])
    # Attempt 1 leased to PID at t=1 s for 2 s, never started there; attempt 2 ran.
    evidence.claims[(JOB, 1)].append(Logged(PID, 1 * SECOND, expires_us=3 * SECOND))
    evidence.claims[(JOB, 2)].append(Logged(PID + 1, 4 * SECOND, expires_us=6 * SECOND))
    evidence.starts[(JOB, 2)].append(Logged(PID + 1, 4 * SECOND))
    evidence.ticks[PID] = list(ticks_us)
    return evidence


def test_a_lease_lost_while_its_worker_ran_is_a_violation():
    evidence = _evidence(range(0, 5 * SECOND, SECOND // 10))
    found = invariants.check(evidence)
    assert [line.split(":")[0] for line in found["claimed_never_started"]] == [
        f"job {JOB} attempt 1"]
    assert evidence.frozen_claims == 0


def test_a_lease_lost_while_the_machine_froze_its_worker_is_excused_and_counted():
    ticks = [t for t in range(0, 5 * SECOND, SECOND // 10)
             if not SECOND + SECOND // 10 < t < 3 * SECOND + SECOND // 5]  # 2.2 s silent
    evidence = _evidence(ticks)
    assert "claimed_never_started" not in invariants.check(evidence)
    assert evidence.frozen_claims == 1
    assert evidence.frozen(PID, 2 * SECOND, 2 * SECOND + 1)
    assert not evidence.frozen(PID, 4 * SECOND, 5 * SECOND)
    assert not evidence.frozen(PID + 1, 0, 5 * SECOND)  # no ticks: never judged frozen


def test_a_lease_that_ran_out_in_a_stall_is_excused_and_counted():
    ticks = range(0, 5 * SECOND, SECOND // 10)
    evidence = _evidence(ticks)
    evidence.stalls = [(2 * SECOND + SECOND // 2, 3 * SECOND + SECOND // 10)]
    assert "claimed_never_started" not in invariants.check(evidence)
    assert evidence.stalled_claims == 1
    early = _evidence(ticks)
    early.stalls = [(0, SECOND // 2)]  # over long before the lease ran out
    assert "claimed_never_started" in invariants.check(early)


def _exited(exited_us: int, returncode: int) -> WorkerProcess:
    """A worker of the chaos phase that was never signalled and exited at ``exited_us``
    with ``returncode``."""
    return WorkerProcess(0, Mode.HANDLE_SIGNALS, Path("unused.log"), Path("unused.err"),
                         SimpleNamespace(pid=PID), None, 0.0,
                         exited_at=exited_us / SECOND, returncode=returncode)


def test_an_attempt_spent_by_a_claim_nobody_logged_is_excused_only_if_a_worker_died():
    def orphaned(workers) -> Evidence:
        evidence = Evidence(Settings(), workers, {JOB: ("completed", 2)}, set(), [])
        evidence.claims[(JOB, 2)].append(Logged(PID + 1, 6 * SECOND, expires_us=8 * SECOND))
        evidence.starts[(JOB, 2)].append(Logged(PID + 1, 6 * SECOND))
        return evidence

    clean = orphaned({PID: _exited(5 * SECOND, 0)})
    assert len(invariants.check(clean)["orphaned_claim"]) == 1
    interrupted = orphaned({PID: _exited(5 * SECOND, 130)})  # KeyboardInterrupt at 5 s
    assert "orphaned_claim" not in invariants.check(interrupted)
    assert interrupted.interrupted_claims == 1
    long_before = orphaned({PID: _exited(1 * SECOND, -9)})  # dead before the lease began
    assert len(invariants.check(long_before)["orphaned_claim"]) == 1


def test_an_attempt_spent_by_a_claim_nobody_logged_is_excused_if_a_worker_was_cut_off():
    """Seed 440216 on PostgreSQL: a worker's claim committed as a blackhole began, its
    answer and the hand-back of its rows by token held there past the lease's expiry,
    and the job's next claim found attempt 1 spent by a claim no worker logged."""
    from tests.chaos.proxy import Fault, Window

    def orphaned(window) -> Evidence:
        worker = _exited(9 * SECOND, 130)  # it ended after the next claim
        worker.proxy = SimpleNamespace(windows=[window])
        evidence = Evidence(Settings(), {PID: worker}, {JOB: ("completed", 2)}, set(), [])
        evidence.claims[(JOB, 2)].append(Logged(PID + 1, 6 * SECOND, expires_us=8 * SECOND))
        evidence.starts[(JOB, 2)].append(Logged(PID + 1, 6 * SECOND))
        return evidence

    cut_off = orphaned(Window(Fault.BLACKHOLE, 3.5, 8.5))
    assert "orphaned_claim" not in invariants.check(cut_off)
    assert cut_off.stalled_claims == 1
    earlier = orphaned(Window(Fault.BLACKHOLE, 1.0, 2.5))  # over before the lease began
    assert len(invariants.check(earlier)["orphaned_claim"]) == 1
    # Over a second and a half before the lease ran out: time to hand the rows back.
    through = orphaned(Window(Fault.REFUSE, 3.5, 4.5))
    assert len(invariants.check(through)["orphaned_claim"]) == 1


def _run(job_id: str, n: int, started_s: float, ended_s: float) -> invariants.RunRow:
    return invariants.RunRow(job_id, n, 1, PID, "work", int(started_s * SECOND),
                             int(ended_s * SECOND), "returned", None)


def test_only_the_jobs_dispatched_with_the_key_count_against_its_limit():
    """The harness gives the limited key to the enqueuer's jobs numbered a multiple of
    ten; the workflows' jobs, numbered from FIRST_N, are dispatched without it, so a
    step numbered 1,000,000 running beside two keyed jobs is within the limit (seed
    431047 on SQLite reported it as a third holder), while a third keyed job is not."""
    from tests.chaos import jobs, workflows

    keyed = [_run(f"keyed-{i}", 10 * (i + 1), 1.0, 4.0) for i in range(jobs.KEY_LIMIT)]
    step = _run("chain-step", workflows.FIRST_N, 1.0, 4.0)
    assert jobs.limited(step.n)  # by its number alone it would count
    evidence = Evidence(Settings(), {}, {}, set(), keyed + [step])
    found: defaultdict = defaultdict(list)
    invariants._check_limit(evidence, found)
    assert dict(found) == {}
    evidence = Evidence(Settings(), {}, {}, set(),
                        keyed + [_run("keyed-extra", 10 * (jobs.KEY_LIMIT + 1), 1.0, 4.0)])
    found = defaultdict(list)
    invariants._check_limit(evidence, found)
    assert len(found["limit_exceeded"]) == 1
