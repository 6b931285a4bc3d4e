"""The retry policy without a database (issue #11 item 1): one budget per call shared
by nested layers, a window as well as a count, and DatabaseBusy never read as one more
transient error."""
from __future__ import annotations

import sqlite3

import peewee
import pytest

from caravel_lite.dialect import MARIADB, POSTGRES, SQLITE
from caravel_lite.errors import DatabaseBusy
from caravel_lite.retry import RetryPolicy, call_budget, retrying, transient_retries


class _Db:
    """Just what retrying() asks of a database."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.retry_policy = policy

    def in_transaction(self) -> bool:
        return False


def _locked() -> peewee.OperationalError:
    try:
        raise sqlite3.OperationalError("database is locked")
    except sqlite3.OperationalError as driver:
        driver.sqlite_errorcode = 5  # SQLITE_BUSY, as the driver sets it
        return peewee.OperationalError(driver)


@pytest.mark.parametrize("dialect", [SQLITE, POSTGRES, MARIADB], ids=lambda d: d.name)
def test_database_busy_is_never_transient_whatever_its_text(dialect):
    busy = DatabaseBusy("database is locked: another connection held SQLite's write lock")
    assert not dialect.is_transient(busy)


def test_sqlite_transience_is_read_from_the_error_code():
    assert SQLITE.is_transient(_locked())
    other = sqlite3.OperationalError("database is locked (but really: no such table)")
    other.sqlite_errorcode = 1  # SQLITE_ERROR
    assert not SQLITE.is_transient(peewee.OperationalError(other))


@pytest.mark.parametrize("retries", [0, 1, 5])
def test_two_nested_layers_share_one_budget(retries):
    db = _Db(RetryPolicy(retries=retries, window=60, first_pause=0.0001, pause_cap=0.0001))
    attempts = []

    def statement():
        attempts.append(1)
        raise _locked()

    before = transient_retries.value
    with pytest.raises(DatabaseBusy):
        # the outer layer retries what the inner one gave up on: still one budget
        retrying(SQLITE, db, lambda: retrying(SQLITE, db, statement))
    assert len(attempts) == retries + 1
    assert transient_retries.value - before == retries


def test_the_window_ends_a_budget_before_its_count():
    db = _Db(RetryPolicy(retries=1000, window=0.05, first_pause=0.01, pause_cap=0.01))
    attempts = []

    def statement():
        attempts.append(1)
        raise _locked()

    with pytest.raises(DatabaseBusy) as caught:
        retrying(SQLITE, db, statement)
    assert 2 <= len(attempts) <= 12
    assert "retry budget" in str(caught.value)


def test_a_call_budget_is_per_database_and_per_call():
    first, second = _Db(RetryPolicy(retries=1)), _Db(RetryPolicy(retries=1))
    with call_budget(first) as outer, call_budget(first) as inner, call_budget(second) as other:
        assert outer is inner and other is not outer
    with call_budget(first) as again:
        assert again is not outer  # a new call, a new budget
