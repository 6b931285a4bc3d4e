from __future__ import annotations

from typing import Iterator

import peewee
import pytest

from tests.effects import jobs


@pytest.fixture
def app_db(db) -> Iterator[peewee.Database]:
    """The queue's database with the tests' application table, empty."""
    jobs.create_table(db)
    db.execute_sql(f"DELETE FROM {jobs.TABLE}")
    jobs.hooks.inside = None
    jobs.hooks.lease_lost.clear()
    jobs._databases.clear()
    yield db
    jobs.hooks.inside = None
    jobs._databases.clear()
    db.execute_sql(f"DROP TABLE {jobs.TABLE}")
