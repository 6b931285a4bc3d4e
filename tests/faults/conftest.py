"""Fixtures of the fault suite and the report printed when the run ends."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import peewee
import pytest

from tests.faults import jobs, report


@pytest.fixture
def fault_db(db) -> Iterator[peewee.Database]:
    """The migrated test database with the fault suite's own record tables."""
    jobs.create_tables(db)
    jobs.use_database(db)
    try:
        yield db
    finally:
        jobs.use_database(None)
        if db.in_transaction():
            db.rollback()
        jobs.drop_tables(db)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = report.table()
    if not lines:
        return
    terminalreporter.section("caravel_lite fault report")
    for line in lines + report.notes:
        terminalreporter.write_line(line)
    target = os.environ.get("CARAVEL_FAULT_REPORT")
    if target:
        Path(target).write_text("\n".join(lines + report.notes) + "\n")
