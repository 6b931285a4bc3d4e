"""The "against the last release" section of the report, from a ``--baseline`` run
(:mod:`bench.baseline`): the sides, one row per scenario and database with both
medians, the ratio, its spread and the verdict, and the import times."""
from __future__ import annotations

import os
from typing import List, Optional, Sequence, Tuple

from bench.baseline import CHUNK, SCENARIOS, TARGET, BaselineResults, Pair

HEADER = ("| scenario | database | this checkout jobs/s | baseline jobs/s | ratio | "
          "95% interval | spread (round pairs) | cross-check | verdict |")
RULE = "|---|---|---:|---:|---:|---:|---:|---:|---|"


def verdict(ratio: float, interval: Optional[Tuple[float, float]] = None) -> str:
    """Met or missed by the median ratio (the target's definition); "undecided" added
    when the ratio's interval holds the target on both sides."""
    said = "met" if ratio >= TARGET else "**missed**"
    if interval is not None and interval[0] < TARGET <= interval[1]:
        said += " (undecided by the noise)"
    return said


def cross_check(pair: Pair) -> str:
    """The p50 call ratio (per-call scenarios) or the CPU per job ratio (drains)."""
    if pair.p50_ratio is not None:
        return f"p50 call {pair.p50_ratio:.3f}x"
    if pair.cpu_ratio is not None:
        return f"CPU/job {pair.cpu_ratio:.3f}x"
    return "-"


def rows(results: BaselineResults) -> List[str]:
    lines = []
    titles = {s.key: s.title for s in SCENARIOS}
    for (db, key), pair in results.pairs.items():
        start = f"| {titles[key]} | {results.label(db)} |"
        if pair.error or not pair.this or not pair.base:
            lines.append(f"{start} - | - | | | | | no figure ({pair.error or 'not measured'}) |")
            continue
        ours, theirs = pair.rates
        low, high = pair.spread
        note = f" ({pair.incomplete} round(s) incomplete)" if pair.incomplete else ""
        interval = pair.interval  # 2,000 resamples: computed once per row
        lines.append(f"{start} {ours:,.0f} | {theirs:,.0f} | {pair.ratio:.3f}x | "
                     f"{interval[0]:.3f}-{interval[1]:.3f}x | {low:.3f}-{high:.3f}x | "
                     f"{cross_check(pair)} | {verdict(pair.ratio, interval)}{note} |")
    return lines


def render_imports(results: BaselineResults) -> List[str]:
    if not results.imports:
        return []
    by_label = {t.label: t for t in results.imports}
    peewee = by_label["peewee"]

    def cell(label: str) -> str:
        t = by_label[label]
        low, high = t.spread_ms
        return f"{t.median_ms:.0f} ms ({low:.0f}-{high:.0f})"
    lines = [
        f"Import time, whole process (interpreter start-up included), {len(peewee.times)} "
        "runs of each command in turns, median (lowest-highest), in a virtual environment "
        "holding peewee alone (no extras installed); a measurement, `python -m "
        "bench.import_time --profile` says where the time goes:",
        "",
        "| command | this checkout | baseline | ratio to `import peewee` (this / baseline) "
        "| target |",
        "|---|---:|---:|---:|---|",
        f'| `python -c "import caravel_lite"` | {cell("this")} | {cell("base")} | '
        f'{by_label["this"].median_ms / peewee.median_ms:.2f}x / '
        f'{by_label["base"].median_ms / peewee.median_ms:.2f}x | <= 1.5x |',
        f'| `python -c "import peewee"` | {cell("peewee")} | | | |',
    ]
    return lines


def render(results: BaselineResults) -> str:
    """The "against the last release" section: the sides, the table, the import times."""
    lines = [
        f"This checkout: {results.this_label}. Baseline (`--baseline {results.ref}`): "
        f"{results.base_label}. Each side's library is imported from its own checkout and "
        f"each database is migrated by that side's own scripts "
        + ", ".join(f"({'this' if k == 'this' else 'baseline'}: {len(v)} applied)"
                    for k, v in results.migrations.items())
        + f". {results.jobs:,} jobs per round, {results.rounds} round(s) per side, the "
        "sides alternating (per-call scenarios: both sides' processes up together, taking "
        f"turns every {CHUNK} calls). Ratio: this checkout's median jobs/s over the "
        "baseline's; 95% interval: the ratio's, by resampling the round pairs (bootstrap); "
        "spread: the lowest and highest ratio of one round's pair; "
        "cross-check, little moved by other processes: the baseline's median call time "
        "over this checkout's (p50 call), or its median CPU time per job in the draining "
        "process, every thread, over this checkout's (CPU/job; on SQLite that includes "
        "the database's own work). Target: this checkout >= "
        f"{TARGET:.2f}x the baseline's throughput. The run took "
        f"{results.seconds / 60:.1f} minutes; the 1-minute load average was "
        f"{results.loads[0]:.1f} at its start and {results.loads[1]:.1f} at its end (on "
        f"{os.cpu_count()} cores: a loaded machine moves these ratios by far more than "
        "3%).",
        "",
        HEADER,
        RULE,
        *rows(results),
    ]
    lines += [f"- {results.label(db)}: {note}" for db, note in results.notes.items()]
    imports = render_imports(results)
    if imports:
        lines += ["", *imports]
    return "\n".join(lines)


def lowest(results: BaselineResults, db: str,
           keys: Sequence[str]) -> Optional[Tuple[str, Pair]]:
    """The scenario of ``keys`` with the lowest ratio on ``db`` (None if none measured)."""
    measured = [(k, results.pairs[(db, k)]) for k in keys
                if (db, k) in results.pairs and results.pairs[(db, k)].this
                and results.pairs[(db, k)].base and not results.pairs[(db, k)].error]
    return min(measured, key=lambda item: item[1].ratio, default=None)
