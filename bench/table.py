"""The results as Markdown tables, one per database, peers side by side with the
caravel_lite ratio (above 1 means caravel_lite did better), and each case's notes."""
from __future__ import annotations

from typing import List, Optional

from bench import peers
from bench.runner import Results
from bench.timing import Summary

REFERENCE = "caravel_lite"
HEADER = ("| scenario | subject | jobs/s (median) | spread (min-max) | p50 ms | p99 ms "
          "| figure | caravel_lite vs subject |")
RULE = "|---|---|---:|---:|---:|---:|---:|---:|"


def _num(value: Optional[float], digits: int = 0) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:,.{digits}f}"


def figure(value: Optional[float], unit: Optional[str]) -> str:
    """A case's own figure with its unit, as the tables and the target table show it."""
    if value is None or unit is None or value != value:
        return "-"
    if unit == "% of ideal":
        return f"{value:.0f}% of ideal"
    if unit == "% of a core":
        return f"{value:.2f}% of a core"
    if unit == "connections":
        return f"{value:.0f}"
    if unit == "x empty":
        return f"{value:.2f}x empty"
    if unit == "s":
        return f"{value:,.2f} s"
    if unit == "ms p99":
        return f"p99 {value:,.1f} ms"
    return f"{value:g} {unit}"


def _ratio(reference: Optional[Summary], other: Summary, by_rate: bool, own: bool) -> str:
    if reference is None or own:
        return ""
    if by_rate:
        if not other.rate or reference.rate != reference.rate:
            return "-"
        return f"{reference.rate / other.rate:.2f}x"
    if not reference.p50_ms or other.p50_ms is None:
        return "-"
    return f"{other.p50_ms / reference.p50_ms:.2f}x (p50)"


def render(results: Results) -> str:
    out: List[str] = []
    for target in results.targets:
        out.append(f"### {target.label}\n")
        note = results.target_notes.get(target.key)
        if note:
            out.append(f"{note}\n")
            continue
        out += [HEADER, RULE]
        notes: List[str] = []
        for case in results.cases:
            reference = results.outcomes.get((target.key, case.key, REFERENCE))
            reference = reference if isinstance(reference, Summary) else None
            for key in results.peers:
                outcome = results.outcomes.get((target.key, case.key, key))
                if outcome is None:
                    continue
                name = peers.load(key).name
                if isinstance(outcome, str):
                    out.append(f"| {case.title} | {name} | {outcome} | | | | | |")
                    continue
                rate = _num(outcome.rate) if case.rate else "-"
                spread = (f"{_num(outcome.rate_min)}-{_num(outcome.rate_max)}"
                          if case.rate and outcome.rounds > 1 else "-")
                if outcome.incomplete:
                    spread += f" ({outcome.incomplete} round(s) incomplete)"
                ratio = _ratio(reference, outcome, case.rate,
                               key.startswith(REFERENCE)) if case.rate or case.unit is None else ""
                out.append(f"| {case.title} | {name} | {rate} | {spread} | "
                           f"{_num(outcome.p50_ms, 2)} | {_num(outcome.p99_ms, 2)} | "
                           f"{figure(outcome.value, case.unit)} | {ratio} |")
                if outcome.note:
                    notes.append(f"- {case.title}, {name}: {outcome.note}")
        out.append("")
        if notes:
            out += ["Notes:", "", *notes, ""]
    return "\n".join(out)
