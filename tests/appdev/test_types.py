"""Types, as a user's type checker sees them: mypy --strict over small snippets that
import caravel_lite from a virtualenv where it is pip-installed (so py.typed must ship),
one that must pass and one whose every marked line must be reported."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict, List

import pytest


GOOD = textwrap.dedent('''
    import uuid
    from dataclasses import dataclass

    from caravel_lite import DatabaseQueue, Dispatch, EnqueueResult, JobContext, JobRegistry
    from caravel_lite.testing import DrainResult, ManualClock, drain

    registry = JobRegistry()


    @dataclass(frozen=True)
    class Report:
        report_id: uuid.UUID


    @registry.job("reports.generate.v1", Report)
    def generate(job: Report, ctx: JobContext) -> int:
        return job.report_id.int


    @dataclass(frozen=True)
    class Archive:
        report_id: uuid.UUID


    @registry.job("reports.archive.v1", Archive)
    def archive(job: object, ctx: JobContext) -> None:  # a wider parameter accepts it
        pass


    @dataclass(frozen=True)
    class Notify:
        user: str


    @registry.job("users.notify.v1", Notify)
    async def notify(job: Notify, ctx: JobContext) -> str:
        return job.user


    def use(queue: DatabaseQueue, ctx: JobContext) -> int:
        value: int = generate(Report(uuid.uuid4()), ctx)
        result: EnqueueResult = queue.enqueue(Notify("ada"), Dispatch("mail", tenant_id="t"))
        summary: DrainResult = drain(queue, "mail", clock=ManualClock())
        return value + summary.completed + len(str(result.job_id))


    async def use_async(queue: DatabaseQueue, ctx: JobContext) -> str:
        result: EnqueueResult = await queue.aenqueue(Notify("bob"), Dispatch("mail", "t"))
        return await notify(Notify(str(result.job_id)), ctx)
''')

BAD = textwrap.dedent('''
    from dataclasses import dataclass

    from caravel_lite import JobContext, JobRegistry

    registry = JobRegistry()


    @dataclass(frozen=True)
    class Report:
        report_id: int


    @dataclass(frozen=True)
    class Invoice:
        number: int


    @registry.job("reports.generate.v1", Report)
    def generate(job: Report, ctx: JobContext) -> int:
        return job.report_id


    @registry.job("reports.wrong.v1", Report)  # E: job parameter is not a Report
    def wrong_type(job: Invoice, ctx: JobContext) -> None:
        pass


    @registry.job("reports.no-context.v1", Report)  # E: no context parameter
    def no_context(job: Report) -> None:
        pass


    def caller(ctx: JobContext) -> None:
        text: str = generate(Report(1), ctx)  # E: the return type is kept (int)
        generate(Invoice(1), ctx)  # E: the job parameter type is kept
''')


def marked_lines(source: str) -> List[int]:
    return [number for number, line in enumerate(source.splitlines(), 1) if "# E:" in line]


def error_lines(output: str, name: str) -> Dict[int, str]:
    found: Dict[int, str] = {}
    for match in re.finditer(rf"^{re.escape(name)}:(\d+): error: (.*)$", output, re.M):
        found.setdefault(int(match.group(1)), match.group(2))
    return found


def mypy(python: Path, folder: Path, name: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    env.pop("MYPYPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--python-executable", str(python), "--cache-dir", str(folder / ".mypy_cache"),
         name], cwd=folder, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_the_installed_package_is_typed_and_decorated_handlers_keep_their_types(
        installed_python, tmp_path):
    (tmp_path / "good.py").write_text(GOOD)
    (tmp_path / "bad.py").write_text(BAD)
    good = mypy(installed_python, tmp_path, "good.py")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = mypy(installed_python, tmp_path, "bad.py")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    errors = error_lines(bad.stdout, "bad.py")
    assert sorted(errors) == marked_lines(BAD), bad.stdout
    assert "Invoice" in errors[marked_lines(BAD)[0]]
