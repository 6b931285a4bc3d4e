"""The two outbox samples run as a user runs them and tell the story they promise."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_sample(name: str) -> str:
    done = subprocess.run([sys.executable, str(ROOT / "samples" / name)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_outbox_example_stages_relays_and_runs():
    out = run_sample("outbox_example.py")
    expected = [
        "rolled back (payment declined): customers=0, intents=0",
        "committed: customers=1, intents=1, already_staged=False",
        "jobs in the queue before the relay: 0",
        "same intent: True, already_staged=True",
        "relay marked 1; outbox pending=0, dispatched=1, set_aside=0",
        "a second pass marks 0",
        "found the job under the outbox id: True; state=pending",
        "handler: welcome email for customer 1 (tenant acme, attempt 1)",
        "job state=completed",
    ]
    lines = [line.strip() for line in out.splitlines()]
    positions = [lines.index(text) for text in expected]  # ValueError names a missing line
    assert positions == sorted(positions), out


def test_in_transaction_example_commits_or_rolls_back_both():
    out = run_sample("in_transaction_example.py")
    expected = [
        "rolled back (out of stock): orders=0, jobs=0",
        "committed: orders=1, jobs=1, already_enqueued=False",
        "handler: shipping order 1 (tenant acme)",
        "job state=completed",
    ]
    lines = [line.strip() for line in out.splitlines()]
    positions = [lines.index(text) for text in expected]
    assert positions == sorted(positions), out
