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
from dataclasses import dataclass

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


def make_queue() -> DatabaseQueue:
    return DatabaseQueue(open_database(os.environ[URL_ENV]), registry, APP_OPTIONS)


def make_nothing() -> int:
    return 42


queue = make_queue() if os.environ.get(URL_ENV) else None
