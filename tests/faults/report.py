"""Figures gathered by the fault tests, printed as a table when the run ends
(tests/faults/conftest.py) and kept in docs/RELIABILITY.md."""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List

COLUMNS = (
    ("jobs_processed", "jobs processed"),
    ("kills", "kills survived"),
    ("restarts", "restarts survived"),
    ("transient_retries", "transient errors retried"),
    ("fuzzed", "fuzzed inputs tried"),
    ("lost", "jobs lost"),
    ("double_applied", "jobs double-applied"),
)

figures: Dict[str, Dict[str, float]] = defaultdict(lambda: defaultdict(float))
notes: List[str] = []


def add(backend: str, key: str, amount: float = 1) -> None:
    figures[backend][key] += amount


def note(text: str) -> None:
    notes.append(text)


def table() -> List[str]:
    if not figures:
        return []
    backends = [b for b in ("sqlite", "postgres", "mysql") if b in figures]
    names = {"sqlite": "SQLite", "postgres": "PostgreSQL", "mysql": "MariaDB"}
    header = ["database"] + [title for _, title in COLUMNS]
    rows = [[names[b]] + [str(int(figures[b][key])) for key, _ in COLUMNS] for b in backends]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in rows]
    return out
