"""The audit's own rules (tests.chaos.invariants), on hand-made evidence: a lease lost
while its worker was frozen is excused and counted, one lost while it ran is not."""
from __future__ import annotations

from tests.chaos import invariants
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
