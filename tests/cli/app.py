"""The application objects the command-line tests name as ``MODULE:ATTR``.

``tests.cli.app:registry`` is a JobRegistry; ``:queue`` the application's own
DatabaseQueue (built at import from CARAVEL_TEST_APP_QUEUE_URL, as an application
module would build it from its settings) and ``:make_queue`` a factory of one. The
application's options allow payloads of only 64 bytes, so a worker that really uses
them fails a longer job as INVALID_PAYLOAD, while one with the default options
completes it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from caravel_lite import DatabaseQueue, JobContext, JobRegistry, QueueOptions, open_database

URL_ENV = "CARAVEL_TEST_APP_QUEUE_URL"
APP_OPTIONS = QueueOptions(max_payload_bytes=64)
QUEUE = "cli-work"
OTHER_QUEUE = "cli-other"
TENANT = "tenant-cli"


@dataclass(frozen=True)
class Note:
    text: str


registry = JobRegistry()


@registry.job("tests.cli.note.v1", Note)
def note(job: Note, ctx: JobContext) -> None:
    pass


@dataclass(frozen=True)
class Gate:
    """Waits until ``together`` Gate handlers have started (files in
    CARAVEL_TEST_GATE_DIR); fails after 20 s, so it completes only when that many
    run at the same time."""

    together: int


@registry.job("tests.cli.gate.v1", Gate)
def gate(job: Gate, ctx: JobContext) -> None:
    directory = Path(os.environ["CARAVEL_TEST_GATE_DIR"])
    (directory / f"{ctx.job_id}.started").touch()
    deadline = time.monotonic() + 20
    while len(list(directory.glob("*.started"))) < job.together:
        if time.monotonic() > deadline:
            raise RuntimeError("the gate jobs did not run together")
        time.sleep(0.02)


@dataclass(frozen=True)
class Stubborn:
    """Announces itself in CARAVEL_TEST_READY, then ignores cancellation for
    ``seconds``."""

    seconds: float


@registry.job("tests.cli.stubborn.v1", Stubborn)
def stubborn(job: Stubborn, ctx: JobContext) -> None:
    Path(os.environ["CARAVEL_TEST_READY"]).write_text(str(ctx.job_id))
    deadline = time.monotonic() + job.seconds
    while time.monotonic() < deadline:
        time.sleep(0.05)


def make_queue() -> DatabaseQueue:
    return DatabaseQueue(open_database(os.environ[URL_ENV]), registry, APP_OPTIONS)


def make_nothing() -> int:
    return 42


queue = make_queue() if os.environ.get(URL_ENV) else None
