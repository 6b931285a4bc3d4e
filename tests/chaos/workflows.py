"""Chains and batches in a fault-injection run (issue #26): a few of each enqueued with
the run's first jobs, their steps and members handled like every other job (the seeded
plan decides what each handler does), and the invariants they keep whatever the
faults, stops and kills:

- a chain's steps ran in order (a step's first run began after the step before it
  returned in the attempt that completed it), its completed steps form a prefix, and a
  step is HELD only after a step that did not complete;
- a batch counted every member once (finished = members, failed = dead-lettered ones),
  closed, and decided each callback once: on_complete due, on_success due only if
  none failed (else cancelled), on_failure due only if one did (else cancelled).

Held steps and ruled-out callbacks are final for the drain and for "unfinished"."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

import peewee

from caravel_lite import DatabaseQueue, Dispatch

# Few: their 36 jobs join the run's, and the drain must still end within its timeout
# (with 80, seed 929932 on PostgreSQL left plain jobs pending when it ran out).
CHAINS = 4
CHAIN_STEPS = 3
BATCHES = 4
BATCH_MEMBERS = 3
# Job numbers of the workflows' jobs, past any the enqueuer reaches in a run.
FIRST_N = 1_000_000
# States a workflow's job may rest in at the end besides completed and dead-lettered.
RESTING = ("held", "cancelled")

DESCRIPTIONS = {
    "chain_order": "a chain's steps ran one after another, each after the step before "
                   "it completed",
    "chain_held": "a chain step is held only after a step that did not complete",
    "batch_count": "a batch counted each member once and closed once all were final",
    "batch_callbacks": "a batch decided each callback once, as its outcome says",
}


@dataclass
class Workflows:
    chains: List[Tuple[str, ...]] = field(default_factory=list)
    batches: List[Tuple[str, str, str, str]] = field(default_factory=list)  # id, callbacks


def enqueue(queue: DatabaseQueue, job: Callable[[int], object], to: Dispatch) -> Workflows:
    made = Workflows()
    n = FIRST_N
    for _ in range(CHAINS):
        chain = queue.enqueue_chain([(job(n + k), to) for k in range(CHAIN_STEPS)])
        made.chains.append(tuple(str(i) for i in chain.job_ids))
        n += CHAIN_STEPS
    for _ in range(BATCHES):
        batch = queue.enqueue_batch([(job(n + k), to) for k in range(BATCH_MEMBERS)],
                                    on_complete=(job(n + BATCH_MEMBERS), to),
                                    on_success=(job(n + BATCH_MEMBERS + 1), to),
                                    on_failure=(job(n + BATCH_MEMBERS + 2), to))
        made.batches.append((str(batch.batch_id), str(batch.on_complete),
                             str(batch.on_success), str(batch.on_failure)))
        n += BATCH_MEMBERS + 3
    return made


def check(db: peewee.Database, made: Workflows, states: Dict[str, Tuple[str, int]],
          runs: List) -> Dict[str, List[str]]:
    """Each broken workflow invariant with one line per instance (runs: RunRow)."""
    found: Dict[str, List[str]] = defaultdict(list)
    returned = {(r.job_id, r.attempt): r for r in runs if r.outcome == "returned"}
    first_start: Dict[str, int] = {}
    for r in runs:
        first_start[r.job_id] = min(first_start.get(r.job_id, r.started_us), r.started_us)
    for steps in made.chains:
        seen = [states.get(step, ("missing", 0))[0] for step in steps]
        for k in range(1, len(steps)):
            before, now = seen[k - 1], seen[k]
            if now == "held" and before == "completed":
                found["chain_held"].append(f"chain step {steps[k]} held after a completed "
                                           f"step {steps[k - 1]}")
            if now in ("completed", "dead_letter") and before != "completed":
                found["chain_order"].append(f"chain step {steps[k]} {now} after step "
                                            f"{steps[k - 1]} {before}")
            if steps[k] in first_start and before == "completed":
                done = returned.get((steps[k - 1], states[steps[k - 1]][1]))
                if done is None or first_start[steps[k]] < (done.ended_us or 0):
                    found["chain_order"].append(f"chain step {steps[k]} began before step "
                                                f"{steps[k - 1]} returned")
    p = db.param
    for batch_id, on_complete, on_success, on_failure in made.batches:
        row = db.execute_sql(f"SELECT total, finished, failed, closed_at FROM "
                             f"caravel_workflows WHERE id = {p}", (batch_id,)).fetchone()
        members = [r[0] for r in db.execute_sql(
            f"SELECT job_id FROM caravel_workflow_jobs WHERE workflow_id = {p}",
            (batch_id,)).fetchall()]
        ended = [states.get(m, ("missing", 0))[0] for m in members]
        if any(state not in ("completed", "dead_letter") for state in ended):
            continue  # a member left unfinished (the drain ran out): "unfinished" says so
        dead = ended.count("dead_letter")
        total, finished, failed, closed = row
        if (int(total), int(finished), int(failed)) != (len(members), len(members), dead) \
                or closed is None:
            found["batch_count"].append(f"batch {batch_id}: total {total}, finished "
                                        f"{finished}, failed {failed}, closed {closed}; "
                                        f"{len(members)} members, {dead} dead-lettered")
        wanted = {on_complete: True, on_success: dead == 0, on_failure: dead > 0}
        for callback, due in wanted.items():
            state = states.get(callback, ("missing", 0))[0]
            ran = state in ("completed", "dead_letter")
            if ran != due or (not due and state != "cancelled"):
                found["batch_callbacks"].append(f"batch {batch_id}: callback {callback} "
                                                f"{state}, wanted {'run' if due else 'cancelled'}")
    return dict(found)
