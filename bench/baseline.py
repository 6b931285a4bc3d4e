"""``python -m bench --baseline REF``: this checkout's library against another one's
(the last release, the commit a round started from) in the same run, the report's
"against the last release" table.

Each scenario runs on each selected database in rounds; a round measures both sides,
one after the other, the order swapped every round, so that a slow moment of the
machine falls on both alike. Every step runs in a fresh process importing its side's
library (:mod:`bench.side`), in a fresh database migrated by that side's own scripts.
The ratio is this checkout's median rate over the baseline's; its spread is the
lowest and highest ratio of one round's pair. The import time of each side (and of
peewee) is measured too (:mod:`bench.import_time`), whole processes, alternated.
"""
from __future__ import annotations

import contextlib
import os
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from bench import checkout, import_time, side, targets
from bench.settings import Settings
from bench.timing import Sample, percentile

TARGET = 0.97  # issue 31: new features cost nothing when unused
BOOTSTRAP = 2000  # resamples of a pair's rounds for its ratio's interval


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    steps: Tuple[str, ...]  # side steps run in one fresh database; the last is timed


SCENARIOS = (
    Scenario("enqueue", "enqueue one job per call, no key", ("enqueue",)),
    Scenario("enqueue-key", "enqueue one job per call, each with an idempotency key",
             ("enqueue-key",)),
    Scenario("claim", "claim + complete, one job at a time", ("claim",)),
    Scenario("default", "drain, default worker, 1 process", ("fill", "default")),
    # The same with the planner's statistics taken after the fill, as autovacuum has
    # them on a table that lived a minute: a fresh table's first claims are planned
    # from the declared row width alone (PostgreSQL), which the "default" row measures.
    Scenario("default-analyzed", "drain, default worker, 1 process, statistics current",
             ("fill", "analyze", "default")),
    Scenario("run-once", "run_once() loop, default worker", ("fill", "run-once")),
)
IMPORT = "import"  # the import-time measurement, selectable like a scenario
CHOICES = tuple(s.key for s in SCENARIOS) + (IMPORT,)


@dataclass
class Pair:
    """One scenario on one database: each side's rounds, in round order."""

    this: List[Sample] = field(default_factory=list)
    base: List[Sample] = field(default_factory=list)
    error: str = ""

    @property
    def rates(self) -> Tuple[float, float]:
        return (statistics.median(s.rate for s in self.this),
                statistics.median(s.rate for s in self.base))

    @property
    def ratio(self) -> float:
        ours, theirs = self.rates
        return ours / theirs

    @property
    def spread(self) -> Tuple[float, float]:
        ratios = [a.rate / b.rate for a, b in zip(self.this, self.base)]
        return min(ratios), max(ratios)

    @property
    def p50_ratio(self) -> Optional[float]:
        """The baseline's median call time over this checkout's (per-call scenarios;
        above 1 means this checkout is faster): a cross-check little moved by the
        moments another process took the core, which weigh on the throughput."""
        ours = [percentile(s.latencies, 50) for s in self.this if s.latencies]
        theirs = [percentile(s.latencies, 50) for s in self.base if s.latencies]
        if not ours or not theirs:
            return None
        return statistics.median(theirs) / statistics.median(ours)

    @property
    def interval(self) -> Tuple[float, float]:
        """A 95% bootstrap interval of :attr:`ratio`: the round pairs resampled with
        replacement (BOOTSTRAP times, seeded: a report is reproducible from its
        samples), the ratio of medians of each resample, its 2.5th and 97.5th
        percentiles. How far the machine's noise leaves the ratio undecided."""
        rng = random.Random(0)
        pairs = list(zip(self.this, self.base))
        ratios = []
        for _ in range(BOOTSTRAP):
            drawn = [rng.choice(pairs) for _ in pairs]
            ratios.append(statistics.median(a.rate for a, _ in drawn)
                          / statistics.median(b.rate for _, b in drawn))
        ratios.sort()
        return ratios[int(0.025 * len(ratios))], ratios[int(0.975 * len(ratios)) - 1]

    @property
    def cpu_ratio(self) -> Optional[float]:
        """The baseline's median CPU time per job over this checkout's (drains: the
        worker process's, every thread, first handler to last; above 1 means this
        checkout spends less): a cross-check of the library's own cost that a moment
        of another process taking the core moves far less than the drain's rate.
        On SQLite it holds the database's work too (in the process); on a server,
        the client's only."""
        def per_job(samples: List[Sample]) -> List[float]:
            return [s.cpu_seconds / s.count for s in samples
                    if s.cpu_seconds is not None and s.count and s.complete]
        ours, theirs = per_job(self.this), per_job(self.base)
        if not ours or not theirs:
            return None
        return statistics.median(theirs) / statistics.median(ours)

    @property
    def incomplete(self) -> int:
        return sum(1 for s in self.this + self.base if not s.complete)


@dataclass
class BaselineResults:
    ref: str
    this_label: str
    base_label: str
    jobs: int
    rounds: int
    databases: List[targets.Target] = field(default_factory=list)
    pairs: Dict[Tuple[str, str], Pair] = field(default_factory=dict)
    notes: Dict[str, str] = field(default_factory=dict)   # database -> why not measured
    migrations: Dict[str, List[str]] = field(default_factory=dict)  # side -> applied
    imports: List[import_time.Timing] = field(default_factory=list)
    seconds: float = 0.0
    loads: Tuple[float, float] = (float("nan"), float("nan"))  # 1-minute, start and end

    def label(self, key: str) -> str:
        return next((t.label for t in self.databases if t.key == key), key)


def _order(round_index: int, sides: Sequence[Tuple[str, checkout.Checkout]]):
    return list(sides) if round_index % 2 == 0 else list(reversed(sides))


CHUNK = 100  # calls of one side before the other side's turn, in a per-call scenario


def _paired_calls(scenario: Scenario, target: targets.Target, round_index: int,
                  sides: Sequence[Tuple[str, checkout.Checkout]], s: Settings,
                  workspace: targets.Workspace, cwd: str) -> Dict[str, Tuple[Sample, List]]:
    """One round of a per-call scenario: both sides' processes up at once, each in its
    own fresh database, taking turns every CHUNK calls (the first turn swapped every
    chunk), so that both see the same moments of the machine; no new turn starts
    after twice the drain budget (one for each side: the round is then incomplete)."""
    step = scenario.steps[-1]
    with contextlib.ExitStack() as stack:
        servers: Dict[str, side.Server] = {}
        for name, co in _order(round_index, sides):
            fresh = stack.enter_context(targets.fresh(target, workspace))
            servers[name] = side.Server(checkout.HERE, co.root, step, fresh, s.jobs, cwd)
            stack.callback(servers[name].close)
        chunks: Dict[str, List[Sample]] = {name: [] for name, _ in sides}
        started = time.monotonic()
        for c, offset in enumerate(range(0, s.jobs, CHUNK)):
            if time.monotonic() - started > s.drain_budget * 2:
                break
            for name, _ in _order(round_index + c, sides):
                chunks[name].append(servers[name].calls(offset, min(CHUNK, s.jobs - offset)))
        stack.pop_all().close()
        return {name: (_joined(chunks[name], s.jobs), servers[name].ready.get("applied", []))
                for name, _ in sides}


def _joined(parts: Sequence[Sample], expected: int) -> Sample:
    return Sample(sum(p.count for p in parts), sum(p.seconds for p in parts),
                  [latency for p in parts for latency in p.latencies], expected=expected)


def _one_round(scenario: Scenario, target: targets.Target, root: str, s: Settings,
               workspace: targets.Workspace, cwd: str) -> Tuple[Sample, List[str]]:
    applied: List[str] = []
    answer: Dict = {}
    with targets.fresh(target, workspace) as fresh:
        for step in scenario.steps:
            answer = side.run_step(checkout.HERE, root, step, fresh, s.jobs, s.drain_budget,
                                   s.timeout, cwd)
            applied = applied or answer.get("applied", [])
    return side.sample_of(answer), applied


def _imports(sides: Sequence[Tuple[str, checkout.Checkout]], runs: int,
             log: Callable[[str], None]) -> List[import_time.Timing]:
    with import_time.bare_python() as python:
        commands = []
        for name, co in sides:
            import_time.compile_all(os.path.join(co.root, "caravel_lite"), python)
            import_time.check(co.root, python)
            commands.append(import_time.Command(name, import_time.LIBRARY, co.root, python))
        commands.append(import_time.Command("peewee", import_time.PEEWEE, sides[0][1].root,
                                            python))
        log(f"[import] {runs} runs of each command ...")
        return import_time.measure(commands, runs)


def run(ref: str, s: Settings, chosen: Sequence[targets.Target], scenario_keys: Sequence[str],
        log: Callable[[str], None]) -> BaselineResults:
    started, load_at_start = time.monotonic(), _load()
    here = checkout.this()
    with checkout.baseline(ref) as base, contextlib.ExitStack() as stack:
        results = BaselineResults(ref, here.label, base.label, s.jobs, s.baseline_rounds,
                                  list(chosen))
        sides = (("this", here), ("base", base))
        cwd = stack.enter_context(tempfile.TemporaryDirectory(prefix="caravel_side_"))
        workspace = targets.Workspace()
        stack.callback(workspace.close)
        for name, co in sides:
            found = side.run_step(checkout.HERE, co.root, "identity", None, 0, 0, s.timeout,
                                  cwd)["library"]
            log(f"[baseline] {name}: {co.label}: caravel_lite from {found}")
        if IMPORT in scenario_keys:
            results.imports = _imports(sides, s.import_runs, log)
        for target in chosen:
            reason = targets.server_reachable(target)
            if reason is not None:
                results.notes[target.key] = f"skipped, server unreachable: {reason}"
                continue
            for scenario in SCENARIOS:
                if scenario.key in scenario_keys:
                    _measure(results, scenario, target, sides, s, workspace, cwd, log)
    results.seconds = time.monotonic() - started
    results.loads = (load_at_start, _load())
    return results


def _load() -> float:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return float("nan")


def _measure(results: BaselineResults, scenario: Scenario, target: targets.Target,
             sides: Sequence[Tuple[str, checkout.Checkout]], s: Settings,
             workspace: targets.Workspace, cwd: str, log: Callable[[str], None]) -> None:
    pair = results.pairs.setdefault((target.key, scenario.key), Pair())
    for r in range(s.baseline_rounds):
        try:
            if scenario.steps[-1] in side.CALLS:
                measured = _paired_calls(scenario, target, r, sides, s, workspace, cwd)
            else:
                measured = {name: _one_round(scenario, target, co.root, s, workspace, cwd)
                            for name, co in _order(r, sides)}
        except Exception as exc:  # reported in the table, the run goes on
            pair.error = f"{type(exc).__name__}: {exc}"[:160]
            log(f"[{target.key}] {scenario.key}: {pair.error}")
            return
        for name, (sample, applied) in measured.items():
            results.migrations.setdefault(name, applied)
            getattr(pair, name).append(sample)
        log(f"[{target.key}] {scenario.key} round {r + 1}: " + ", ".join(
            f"{name} {sample.rate:,.0f}/s" for name, (sample, _) in measured.items()))
