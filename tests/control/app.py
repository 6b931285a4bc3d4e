"""Job types of the control tests (cancel, pause, heartbeats, progress, recorded
errors), importable as ``tests.control.app:registry`` by command-line workers.

Handlers that must be seen running write their job id into CARAVEL_TEST_READY_DIR
(one file per job), so a test waits on a condition instead of a sleep."""
from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from caravel_lite import JobContext, JobRegistry

QUEUE = "control"
OTHER = "control-other"
TENANT = "tenant-c"
READY_ENV = "CARAVEL_TEST_READY_DIR"

registry = JobRegistry()


def _ready(ctx: JobContext) -> None:
    directory = os.environ.get(READY_ENV)
    if directory:
        (Path(directory) / str(ctx.job_id)).touch()


@dataclass(frozen=True)
class Hold:
    """Waits (up to ``seconds``) to be cancelled; then returns, or raises when
    ``raise_after``."""

    seconds: float
    raise_after: bool = False


@registry.job("tests.control.hold.v1", Hold)
def hold(job: Hold, ctx: JobContext) -> None:
    _ready(ctx)
    ctx.cancelled.wait(job.seconds)
    if job.raise_after:
        ctx.raise_if_cancelled()


@dataclass(frozen=True)
class AsyncHold:
    seconds: float


@registry.job("tests.control.async_hold.v1", AsyncHold)
async def async_hold(job: AsyncHold, ctx: JobContext) -> None:
    _ready(ctx)
    await asyncio.sleep(job.seconds)


@dataclass(frozen=True)
class Stubborn:
    """Ignores cancellation for ``seconds``, then returns."""

    seconds: float


@registry.job("tests.control.stubborn.v1", Stubborn)
def stubborn(job: Stubborn, ctx: JobContext) -> None:
    _ready(ctx)
    deadline = time.monotonic() + job.seconds
    while time.monotonic() < deadline:
        time.sleep(0.02)


@dataclass(frozen=True)
class Quick:
    n: int


@registry.job("tests.control.quick.v1", Quick)
def quick(job: Quick, ctx: JobContext) -> None:
    pass


@dataclass(frozen=True)
class Boom:
    """Raises ValueError(message) from a local holding ``secret``."""

    message: str


@registry.job("tests.control.boom.v1", Boom)
def boom(job: Boom, ctx: JobContext) -> None:
    secret = "local-secret-value"  # noqa: F841 - never stored: no locals in traces
    raise ValueError(job.message)


@dataclass(frozen=True)
class Steps:
    """Reports progress ``count`` times over ``seconds``, then returns."""

    count: int
    seconds: float


@registry.job("tests.control.steps.v1", Steps)
def steps(job: Steps, ctx: JobContext) -> None:
    _ready(ctx)
    for done in range(1, job.count + 1):
        ctx.progress(done, job.count)
        time.sleep(job.seconds / job.count)
