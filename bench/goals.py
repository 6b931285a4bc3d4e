"""Issue 13's targets (and issue 31's), each checked against one run's results: the
target table.

A row says what caravel_lite measured, what it was compared with (a peer in the same
run, its own one-process figure, or a fixed limit), the ratio where there is one, and
the verdict: met, missed, or no figure (with the reason the run gave instead).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple, Union

from bench import baseline, baseline_table, peers
from bench.runner import Results
from bench.table import figure
from bench.timing import Summary

CARAVEL = "caravel_lite"
HEADER = "| scenario | target | caravel_lite | compared with | ratio | verdict |"
RULE = "|---|---|---:|---:|---:|---|"
NOT_RUN = "not in this run"


@dataclass(frozen=True)
class Row:
    scenario: str
    target: str
    measured: str = "-"
    compared: str = "-"
    ratio: str = ""
    verdict: str = ""

    def markdown(self) -> str:
        return (f"| {self.scenario} | {self.target} | {self.measured} | {self.compared} | "
                f"{self.ratio} | {self.verdict} |")


class _NoFigure(Exception):
    """The run has no number for a target (the message says why)."""


def _summary(results: Results, db: str, case: str, peer: str = CARAVEL) -> Summary:
    """The measured outcome, or _NoFigure with the reason the run gave instead."""
    outcome = results.outcomes.get((db, case, peer))
    if isinstance(outcome, Summary):
        return outcome
    reason = outcome if outcome is not None else results.target_notes.get(db, NOT_RUN)
    raise _NoFigure(reason if peer == CARAVEL else f"{peers.load(peer).name}: {reason}")


def _verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _label(results: Results, db: str) -> str:
    for target in results.targets:
        if target.key == db:
            return target.label
    return db


def _row(scenario: str, target: str, measure: Callable[[], Row]) -> Row:
    try:
        return measure()
    except _NoFigure as exc:
        return Row(scenario, target, verdict=f"no figure ({exc})")


def _versus_peer(results: Results, db: str, case: str, peer: str, at_least: float,
                 scenario: str, their_case: Optional[str] = None, theirs_as: str = "") -> Row:
    """caravel_lite's rate in ``case`` against the peer's in ``their_case`` (the same
    case unless given; ``theirs_as`` then names what the peer did)."""
    target = f">= {at_least:.1f}x {peers.load(peer).name}{theirs_as}"

    def measure() -> Row:
        ours = _summary(results, db, case)
        theirs = _summary(results, db, their_case or case, peer)
        ratio = ours.rate / theirs.rate
        return Row(scenario, target, f"{ours.rate:,.0f}/s", f"{theirs.rate:,.0f}/s",
                   f"{ratio:.2f}x", _verdict(ratio >= at_least))
    return _row(scenario, target, measure)


def _limit(results: Results, db: str, case: str, scenario: str, target: str,
           read: Callable[[Summary], Optional[float]], show: Callable[[float], str],
           ok: Callable[[float], bool],
           compared: Union[str, Callable[[Summary], str]] = "-") -> Row:
    def measure() -> Row:
        outcome = _summary(results, db, case)
        value = read(outcome)
        if value is None or value != value:
            raise _NoFigure("nothing measured")
        beside = compared(outcome) if callable(compared) else compared
        return Row(scenario, target, show(value), beside, "", _verdict(ok(value)))
    return _row(scenario, target, measure)


def _beside(results: Results, db: str, case: str, keys: Sequence[str]) -> str:
    """Other subjects' figures for the same case, as context."""
    parts = []
    for key in keys:
        outcome = results.outcomes.get((db, case, key))
        if isinstance(outcome, Summary) and outcome.value is not None:
            parts.append(f"{peers.load(key).name} {outcome.value:.0f}%")
        elif isinstance(outcome, str) and not outcome.startswith("n/a"):
            parts.append(f"{peers.load(key).name}: {outcome}")
    return "; ".join(parts) or "-"


def rows(results: Results) -> List[Row]:
    s = results.settings
    found: List[Row] = []
    for db in ("sqlite-normal", "sqlite-full"):
        found.append(_versus_peer(results, db, "default1", "huey-sqlite", 1.0,
                                  f"drain no-op jobs, one default worker, {_label(results, db)}"))
    found.append(_versus_peer(results, "postgres", "default1", "pgqueuer", 2.0,
                              "drain no-op jobs, one default worker, PostgreSQL"))
    found.append(_versus_peer(results, "mysql", "default1", "huey-sql", 4.0,
                              "drain no-op jobs, one default worker, MariaDB"))
    for db in ("sqlite-normal", "sqlite-full"):
        found.append(_versus_peer(results, db, "enqueue", "huey-sqlite", 1.0,
                                  f"enqueue one job per call, {_label(results, db)}"))
    db = "sqlite-normal"  # issue 31's, on SQLite NORMAL
    found += [
        _versus_peer(results, db, "enqueue-key", "huey-sqlite", 0.8,
                     f"enqueue one job per call, each with an idempotency key, "
                     f"{_label(results, db)}", "enqueue", " (key-less enqueue)"),
        _versus_peer(results, db, "enqueue", "raw-same-schema", 0.6,
                     f"enqueue one job per call against the same rows written with plain "
                     f"sqlite3, {_label(results, db)}"),
        _versus_peer(results, db, "runonce", "huey-sqlite", 0.5,
                     f"drain no-op jobs, `run_once()` loop vs huey's dequeue + execute loop, "
                     f"{_label(results, db)}"),
    ]
    for db in ("sqlite-normal", "sqlite-full", "postgres"):
        for n in s.concurrencies:
            case = f"sleep{n}"
            ideal = n / s.sleep_seconds
            others = ["caravel_lite-async"]
            if db == "postgres":
                others += ["procrastinate", "pgqueuer"]
            found.append(_limit(
                results, db, case,
                f"{s.sleep_jobs:,} jobs sleeping {s.sleep_seconds * 1000:.0f} ms, concurrency "
                f"{n}, {_label(results, db)}",
                f">= 80% of ideal ({ideal:,.0f}/s)",
                lambda o: o.value, lambda v: f"{v:.0f}% of ideal",
                lambda v: v >= 80.0, _beside(results, db, case, others)))
    found.append(_scaling(results, s.workers))
    for target in results.targets:
        found.append(_limit(results, target.key, "idle",
                            f"CPU of one idle worker over {s.idle_seconds:.0f} s, {target.label}",
                            "<= 0.5% of one core", lambda o: o.value,
                            lambda v: figure(v, "% of a core"), lambda v: v <= 0.5))
    for target in results.targets:
        found.append(_limit(results, target.key, "connections",
                            f"connections of one worker process at concurrency "
                            f"{s.connection_concurrency}, {target.label}", "<= 3",
                            lambda o: o.value, lambda v: f"{v:.0f}", lambda v: v <= 3))
    found.append(_limit(results, "mysql", "pickup", "pickup p50, idle worker, MariaDB",
                        "<= 50 ms", lambda o: o.p50_ms, lambda v: f"{v:,.1f} ms",
                        lambda v: v <= 50.0))
    found.append(_limit(results, "postgres", "history",
                        f"claim cost with {s.history_rows:,} completed rows, PostgreSQL",
                        "<= 1.2x an empty table", lambda o: o.value,
                        lambda v: f"{v:.2f}x empty", lambda v: v <= 1.2, _first_clause))
    for target in results.targets:
        found.append(_limit(results, target.key, "prune",
                            f"claim p99 while prune removes {s.prune_rows:,} finished rows, "
                            f"{target.label}", "<= 50 ms", lambda o: o.value,
                            lambda v: f"{v:,.1f} ms", lambda v: v <= 50.0, _first_clause))
    return found + _against_baseline(getattr(results, "baseline", None))


BASELINE_KEYS = ("enqueue", "claim", "default")  # issue 31's ">= 0.97x" scenarios


def _against_baseline(measured: Optional["baseline.BaselineResults"]) -> List[Row]:
    """Issue 31's targets measured by ``--baseline``: each database's lowest ratio of
    enqueue, claim + complete and the default drain, and the import time."""
    if measured is None:
        return []
    found = []
    for target in measured.databases:
        scenario = (f"enqueue, claim+complete, default drain against {measured.ref}, "
                    f"{target.label}")
        goal = f">= {baseline.TARGET:.2f}x {measured.ref} (each; lowest shown)"
        worst = baseline_table.lowest(measured, target.key, BASELINE_KEYS)
        if worst is None:
            reason = measured.notes.get(target.key, "nothing measured")
            found.append(Row(scenario, goal, verdict=f"no figure ({reason})"))
            continue
        key, pair = worst
        ours, theirs = pair.rates
        found.append(Row(scenario, goal, f"{key} {ours:,.0f}/s", f"{theirs:,.0f}/s",
                         f"{pair.ratio:.2f}x", _verdict(pair.ratio >= baseline.TARGET)))
    timings = {t.label: t for t in measured.imports}
    if "this" in timings:
        ours, peewee = timings["this"].median_ms, timings["peewee"].median_ms
        found.append(Row('`python -c "import caravel_lite"` against `python -c "import '
                         'peewee"`, whole process, no extras installed', "<= 1.5x",
                         f"{ours:,.0f} ms", f"{peewee:,.0f} ms", f"{ours / peewee:.2f}x",
                         _verdict(ours / peewee <= 1.5)))
    return found


def _first_clause(outcome: Summary) -> str:
    """How the figure was made, from the case's note (rows inserted, the prune call)."""
    return outcome.note.split(";")[0] or "-"


def _scaling(results: Results, workers: Tuple[int, ...]) -> Row:
    scenario = "no-op drain, 2 default worker processes vs 1, PostgreSQL"
    target = ">= 1.6x one process"

    def measure() -> Row:
        one, two = (_summary(results, "postgres", f"default{n}") for n in (1, 2))
        ratio = two.rate / one.rate
        compared = f"1 process {one.rate:,.0f}/s"
        if 4 in workers:
            with contextlib.suppress(_NoFigure):
                four = _summary(results, "postgres", "default4")
                compared += f"; 4: {four.rate:,.0f}/s ({four.rate / one.rate:.2f}x)"
        return Row(scenario, target, f"{two.rate:,.0f}/s", compared, f"{ratio:.2f}x",
                   _verdict(ratio >= 1.6))
    return _row(scenario, target, measure)


def render(results: Results) -> str:
    """The target table for the targets this run has data for (rows of databases or
    scenarios the run did not select are left out)."""
    lines = [HEADER, RULE]
    lines += [row.markdown() for row in rows(results) if NOT_RUN not in row.verdict]
    return "\n".join(lines)
