"""``--demo``: the sample's whole story in a fresh temporary directory.

Migrate, enqueue three jobs (twice: the second time returns the same jobs), let a
worker process crash right after saving a result but before acknowledging it, wait for
its lease to run out, recover with a new worker, and show that nothing was lost or
counted twice. The last line is the report JSON.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, TextIO

from caravel_lite.sample import CRASH_EXIT_CODE, QUEUE
from caravel_lite.sample import config as settings
from caravel_lite.sample.app import SampleApp, wait_until

# The crashing worker's lease: short, so that the demo waits only a moment.
DEMO_LEASE_SECONDS = 2


def _counts_line(app: SampleApp) -> str:
    c = app.counts()
    return (f"ready {c.ready}, delayed {c.delayed}, active leases {c.active_leases}, "
            f"expired leases {c.expired_leases}, dead letters {c.dead_letter}, "
            f"completed {c.completed}")


def _child_environment(directory: str) -> Dict[str, str]:
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("CARAVEL_WORKER_", "CARAVEL_SMOKE_"))}
    env.update({settings.DIRECTORY: directory, settings.CRASH_AFTER_RESULT: "1",
                settings.LEASE_SECONDS: str(DEMO_LEASE_SECONDS)})
    return env


def run_demo(out: TextIO) -> int:
    from caravel_lite.worker import QueueWorker

    def say(text: str = "") -> None:
        out.write(text + "\n")
        out.flush()

    with tempfile.TemporaryDirectory(prefix="caravel-demo-") as directory:
        app = SampleApp(settings.SampleConfig(directory=directory))
        say("caravel_lite sample: three jobs add 1, 2 and 3 to a report.")
        say(f"Working in a fresh directory: {directory}")
        say()
        applied = app.migrate()
        say(f"1. Applied the migrations explicitly: {', '.join(applied)}.")
        first = app.enqueue_demo()
        again = app.enqueue_demo()
        same = [r.job_id for r in first] == [r.job_id for r in again]
        new = sum(not r.already_enqueued for r in first)
        repeat = ("the same jobs, each marked already enqueued" if same and
                  all(r.already_enqueued for r in again) else "UNEXPECTED jobs")
        say(f"2. Enqueued keys demo-1..demo-3: {new} new jobs. Enqueueing again returned "
            f"{repeat}.")
        crash = subprocess.run([sys.executable, "-m", "caravel_lite.sample", "--work-once"],
                               env=_child_environment(directory), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        if crash.returncode != CRASH_EXIT_CODE:
            say(f"   The crashing worker exited with {crash.returncode}, not "
                f"{CRASH_EXIT_CODE}: {crash.stderr.strip()}")
            return 1
        after_crash = app.report()
        say(f"3. A worker process claimed a job, saved its result and crashed before "
            f"acknowledging it (exit code {crash.returncode}).")
        say(f"   Saved results: {after_crash['events']} event, total {after_crash['total']}. "
            f"Queue: {_counts_line(app)}.")
        say(f"4. The job stays leased until its {DEMO_LEASE_SECONDS} s lease runs out; "
            f"no other worker can take it before then. Waiting...")
        started = time.monotonic()
        expired = wait_until(lambda: app.counts().expired_leases == 1,
                             timeout=DEMO_LEASE_SECONDS + 30)
        if not expired:
            say("   The lease did not expire in time.")
            return 1
        say(f"   The lease expired after {time.monotonic() - started:.1f} s.")
        worker = QueueWorker(app.queue)
        processed = 0
        while worker.run_once(QUEUE):
            processed += 1
        say(f"5. A new worker processed {processed} jobs. The interrupted job ran again, "
            f"found its saved result and was acknowledged without counting it twice.")
        final = app.report()
        say(f"6. Queue: {_counts_line(app)}.")
        good = final == {"events": 3, "total": 6}
        say("   Nothing lost, nothing counted twice." if good
            else "   Unexpected report: expected 3 events with a total of 6.")
        app.queue_db.close()
        app.results_db.close()
        say(json.dumps(final))
        return 0 if good else 1
