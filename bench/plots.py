"""The report's plots, drawn from one run's results with matplotlib (optional: the
``bench`` extra installs it; without it the report says the plots were skipped).

- throughput against concurrency (jobs sleeping 50 ms), with the ideal rate;
- throughput against worker processes (no-op jobs, default workers);
- claim latency over time while a prune runs.
"""
from __future__ import annotations

import importlib.util
import os
from typing import Any, Dict, List, Optional, Tuple

from bench import peers
from bench.runner import Results
from bench.timing import Summary

PREFIX = "perf-"


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    return plt


def _lines(results: Results, db: str, cases: List[Tuple[int, str]]
           ) -> Dict[str, List[Tuple[int, float]]]:
    """subject name -> [(x, jobs/s)] over the given (x, case key) pairs."""
    found: Dict[str, List[Tuple[int, float]]] = {}
    for x, case in cases:
        for key in results.peers:
            outcome = results.outcomes.get((db, case, key))
            if isinstance(outcome, Summary) and outcome.rate == outcome.rate:
                found.setdefault(peers.load(key).name, []).append((x, outcome.rate))
    return found


def _panels(plt: Any, results: Results, keep: Any) -> Tuple[Any, List[Tuple[Any, Any]]]:
    chosen = [t for t in results.targets if keep(t.key)]
    if not chosen:
        return None, []
    fig, axes = plt.subplots(1, len(chosen), figsize=(4.2 * len(chosen), 3.8), squeeze=False)
    return fig, list(zip(chosen, axes[0]))


def _save(plt, fig, path: str) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def concurrency(results: Results, directory: str) -> Optional[str]:
    plt = _pyplot()
    s = results.settings
    cases = [(n, f"sleep{n}") for n in s.concurrencies]
    fig, panels = _panels(plt, results, lambda db: bool(_lines(results, db, cases)))
    if fig is None:
        return None
    for target, ax in panels:
        for name, points in sorted(_lines(results, target.key, cases).items()):
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
        xs = list(s.concurrencies)
        ax.plot(xs, [n / s.sleep_seconds for n in xs], "k--", label="ideal (N / 50 ms)")
        ax.plot(xs, [0.8 * n / s.sleep_seconds for n in xs], "k:", label="80% of ideal")
        ax.set_title(target.label, fontsize=9)
        ax.set_xlabel("concurrency (one worker process)")
        ax.set_ylabel("jobs/s")
        ax.set_xticks(xs)
        ax.legend(fontsize=7)
    fig.suptitle(f"{s.sleep_jobs:,} jobs sleeping {s.sleep_seconds * 1000:.0f} ms", fontsize=10)
    return _save(plt, fig, os.path.join(directory, PREFIX + "concurrency.png"))


def processes(results: Results, directory: str) -> Optional[str]:
    plt = _pyplot()
    cases = [(n, f"default{n}") for n in results.settings.workers]
    fig, panels = _panels(plt, results, lambda db: bool(_lines(results, db, cases)))
    if fig is None:
        return None
    for target, ax in panels:
        for name, points in sorted(_lines(results, target.key, cases).items()):
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
        ax.set_title(target.label, fontsize=9)
        ax.set_xlabel("worker processes (default settings)")
        ax.set_ylabel("no-op jobs/s")
        ax.set_xticks(list(results.settings.workers))
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    return _save(plt, fig, os.path.join(directory, PREFIX + "processes.png"))


def prune(results: Results, directory: str) -> Optional[str]:
    plt = _pyplot()

    def sample(db: str):
        outcome = results.outcomes.get((db, "prune", "caravel_lite"))
        if isinstance(outcome, Summary) and outcome.samples:
            return outcome.samples[0]
        return None
    fig, panels = _panels(plt, results, lambda db: sample(db) is not None)
    if fig is None:
        return None
    for target, ax in panels:
        got = sample(target.key)
        ax.axvspan(0, got.seconds, color="orange", alpha=0.2, label="prune running")
        ax.scatter([t for t, _ in got.series], [ms for _, ms in got.series], s=4,
                   label="claim")
        ax.axhline(50, color="red", linestyle=":", label="50 ms")
        ax.set_yscale("log")
        ax.set_title(target.label, fontsize=9)
        ax.set_xlabel("seconds since the prune started")
        ax.set_ylabel("claim latency, ms")
        ax.legend(fontsize=7)
    fig.suptitle(f"claims while prune removes {results.settings.prune_rows:,} finished rows",
                 fontsize=10)
    return _save(plt, fig, os.path.join(directory, PREFIX + "prune.png"))


def draw(results: Results, directory: str) -> List[Tuple[str, str]]:
    """(title, file name) of every plot drawn into ``directory``."""
    drawn = []
    for title, make in (("Throughput against concurrency", concurrency),
                        ("Throughput against worker processes", processes),
                        ("Claim latency during a prune", prune)):
        path = make(results, directory)
        if path is not None:
            drawn.append((title, os.path.basename(path)))
    return drawn
