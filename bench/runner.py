"""Runs every selected (database, scenario, peer) case for several rounds, each round
in a fresh database, and keeps a Summary or the reason there is no number."""
from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from bench import peers, targets
from bench.peers.base import NotApplicable
from bench.case import Case
from bench.settings import Settings
from bench.timing import Summary

Outcome = Union[Summary, str]


@dataclass
class Results:
    settings: Settings
    targets: List[targets.Target]
    cases: List[Case]
    peers: List[str]
    outcomes: Dict[Tuple[str, str, str], Outcome] = field(default_factory=dict)
    target_notes: Dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0  # how long the whole run took
    loads: List[float] = field(default_factory=list)  # 1-minute load at each case's start
    baseline: Any = None  # bench.baseline.BaselineResults, with --baseline


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_case(peer_cls, target: targets.Target, case: Case, settings: Settings,
             workspace: targets.Workspace) -> Outcome:
    samples = []
    for _ in range(1 if case.one_round else settings.rounds):
        with targets.fresh(target, workspace) as fresh_target:
            peer = peer_cls(fresh_target)
            try:
                peer.open()
                peer.install()
                samples.append(case.run(peer, settings))
            except NotApplicable as exc:
                return str(exc)
            except Exception as exc:  # reported in the table, the run goes on
                first = (str(exc).strip().splitlines() or [""])[0]
                return f"error: {type(exc).__name__}: {first}"[:120]
            finally:
                with contextlib.suppress(Exception):
                    peer.close()
    return Summary.of(samples)


BUDGET_SPENT = "not run: the run's time budget was spent"


def run(settings: Settings, chosen_targets: Sequence[targets.Target], chosen_cases: Sequence[Case],
        peer_keys: Sequence[str], budget: Optional[float] = None) -> Results:
    """Scenario by scenario, each on every database, each subject in turn. With
    ``budget`` (seconds), cases not started before it is spent are reported as not run,
    so a run on a slow moment still ends in time with every scenario it reached."""
    results = Results(settings, list(chosen_targets), list(chosen_cases), list(peer_keys))
    workspace = targets.Workspace()
    run_started = time.monotonic()
    reachable = []
    for target in chosen_targets:
        reason = targets.server_reachable(target)
        if reason is not None:
            results.target_notes[target.key] = f"skipped, server unreachable: {reason}"
            log(f"[{target.key}] skipped: {reason}")
        else:
            reachable.append(target)
    try:
        for case in chosen_cases:
            for target in reachable:
                if case.kinds is not None and target.kind not in case.kinds:
                    continue
                for key in peer_keys:
                    peer_cls = peers.load(key)
                    if peer_cls.scenarios is not None and case.family not in peer_cls.scenarios:
                        continue
                    outcome = peer_cls.unavailable(target.kind)
                    if outcome == "n/a":
                        continue  # this peer does not exist on this database
                    started = time.monotonic()
                    if outcome is None and budget is not None and started - run_started > budget:
                        outcome = BUDGET_SPENT
                    if outcome is None:
                        with contextlib.suppress(OSError, AttributeError):
                            results.loads.append(os.getloadavg()[0])
                        log(f"[{target.key}] {case.key} {key} ...")
                        outcome = run_case(peer_cls, target, case, settings, workspace)
                    results.outcomes[(target.key, case.key, key)] = outcome
                    log(f"[{target.key}] {case.key} {key}: {describe(outcome)} "
                        f"({time.monotonic() - started:.1f} s)")
    finally:
        workspace.close()
        results.seconds = time.monotonic() - run_started
    return results


def describe(outcome: Outcome) -> str:
    if isinstance(outcome, str):
        return outcome
    text = f"{outcome.rate:,.0f}/s"
    if outcome.p50_ms is not None:
        text += f" p50 {outcome.p50_ms:.2f} ms p99 {outcome.p99_ms:.2f} ms"
    return text
