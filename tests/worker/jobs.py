"""Job types and a registry shared by the worker tests, also imported by the
command-line worker started as a subprocess (``tests.worker.jobs:registry``).

The subprocess handlers are steered by environment variables: a ``Block`` job writes
its id to CARAVEL_TEST_READY (atomically) and waits until it is cancelled, then raises
``Cancelled`` (a handler that returned normally instead would be completed).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from caravel_lite import JobContext, JobRegistry


@dataclass(frozen=True)
class Note:
    text: str


@dataclass(frozen=True)
class Block:
    label: str


registry = JobRegistry()


@registry.job("tests.note.v1", Note)
def note(job: Note, ctx: JobContext) -> None:
    pass


@registry.job("tests.block.v1", Block)
def block(job: Block, ctx: JobContext) -> None:
    ready = os.environ["CARAVEL_TEST_READY"]
    temporary = ready + ".tmp"
    with open(temporary, "w") as handle:
        handle.write(str(ctx.job_id))
    os.replace(temporary, ready)
    ctx.cancelled.wait(30)
    ctx.raise_if_cancelled()


__all__ = ["Note", "Block", "registry"]
