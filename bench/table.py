"""The results as Markdown tables, one per database, peers side by side with the
caravel_lite ratio (above 1 means caravel_lite did better)."""
from __future__ import annotations

from typing import List, Optional

from bench import peers
from bench.runner import Results
from bench.timing import Summary

REFERENCE = "caravel_lite"
HEADER = ("| scenario | subject | jobs/s (median) | spread (min-max) | p50 ms | p99 ms "
          "| caravel_lite vs subject |")
RULE = "|---|---|---:|---:|---:|---:|---:|"


def _num(value: Optional[float], digits: int = 0) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:,.{digits}f}"


def _ratio(reference: Optional[Summary], other: Summary, by_rate: bool, own: bool) -> str:
    if reference is None or own:
        return ""
    if by_rate:
        if not other.rate:
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
        for case in results.cases:
            reference = results.outcomes.get((target.key, case.key, REFERENCE))
            reference = reference if isinstance(reference, Summary) else None
            for key in results.peers:
                outcome = results.outcomes.get((target.key, case.key, key))
                if outcome is None:
                    continue
                name = peers.load(key).name
                if isinstance(outcome, str):
                    out.append(f"| {case.title} | {name} | {outcome} | | | | |")
                    continue
                rate = _num(outcome.rate) if case.rate else "-"
                spread = (f"{_num(outcome.rate_min)}-{_num(outcome.rate_max)}"
                          if case.rate else "-")
                if outcome.incomplete:
                    spread += f" ({outcome.incomplete} round(s) incomplete)"
                out.append(f"| {case.title} | {name} | {rate} | {spread} | "
                           f"{_num(outcome.p50_ms, 2)} | {_num(outcome.p99_ms, 2)} | "
                           f"{_ratio(reference, outcome, case.rate, key.startswith(REFERENCE))} |")
        out.append("")
    return "\n".join(out)
