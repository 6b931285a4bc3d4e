"""Fixtures shared by every suite. ``backend`` parametrises a test over the selected
databases; ``db`` gives it a migrated, empty database; ``db_url`` its URL (for
subprocesses); ``new_database`` makes further empty, unmigrated databases."""
from __future__ import annotations

from typing import Callable, Dict, Iterator

import peewee
import pytest

from caravel_lite import migrate
from caravel_lite.dialect import MARIADB, POSTGRES, SQLITE, open_database

from tests.databases import (ServerDatabases, clear_tables, in_ci, selected_backends,
                             unreachable_reason)

_servers: Dict[str, ServerDatabases] = {}
_migrated: Dict[str, str] = {}
_reasons: Dict[str, object] = {}


def _require(backend: str) -> None:
    if backend not in _reasons:
        _reasons[backend] = unreachable_reason(backend)
    reason = _reasons[backend]
    if reason is not None:
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(str(reason))


def _server(backend: str) -> ServerDatabases:
    if backend not in _servers:
        _servers[backend] = ServerDatabases(backend)
    return _servers[backend]


# The capabilities each test backend has (as caravel_lite.dialect describes them), for
# tests that exercise one capability: they are not collected where it does not exist,
# instead of being reported as skipped.
BACKEND_DIALECTS = {"sqlite": SQLITE, "postgres": POSTGRES, "mysql": MARIADB}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "change_signal(*names): only on backends whose dialect's change_signal "
        "is one of names (caravel_lite.dialect.Dialect.change_signal)")
    config.addinivalue_line("markers", "backends(*names): only on these backends")
    config.addinivalue_line(
        "markers", "without_partial_indexes: only on backends whose dialect cannot make "
        "partial indexes (caravel_lite.dialect.Dialect.partial_indexes)")


def _applies(item) -> bool:
    callspec = getattr(item, "callspec", None)
    backend = callspec.params.get("backend") if callspec is not None else None
    if backend is None:
        return True
    signals = item.get_closest_marker("change_signal")
    if signals is not None and BACKEND_DIALECTS[backend].change_signal not in signals.args:
        return False
    if item.get_closest_marker("without_partial_indexes") is not None \
            and BACKEND_DIALECTS[backend].partial_indexes:
        return False
    only = item.get_closest_marker("backends")
    return only is None or backend in only.args


def pytest_collection_modifyitems(config, items):
    dropped = [item for item in items if not _applies(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [item for item in items if _applies(item)]
    # Under pytest-xdist (setup.cfg's -n auto --dist loadgroup) the fault-injection
    # tests share one group, so one test process runs them one after another: each
    # starts several worker processes on leases of a second or two, and two such
    # fleets at once on a small machine starve each other past their leases.
    for item in items:
        if item.get_closest_marker("faults") is not None:
            item.add_marker(pytest.mark.xdist_group("faults"))


def pytest_sessionfinish(session, exitstatus):
    for server in _servers.values():
        server.drop_all()


@pytest.fixture(params=selected_backends())
def backend(request) -> str:
    _require(request.param)
    return request.param


@pytest.fixture
def new_database(backend, tmp_path) -> Callable[[], str]:
    """Factory of fresh, empty (unmigrated) databases on the current backend; returns
    URLs. Server databases are dropped at the end of the session."""
    counter = iter(range(1_000_000))

    def make() -> str:
        if backend == "sqlite":
            # An empty file is an empty SQLite database, as a server's new database is
            # one: read-only commands refuse a file that is not there (#23 item 5).
            path = tmp_path / f'db{next(counter)}.sqlite'
            path.touch()
            return f"sqlite:///{path}"
        return _server(backend).create()
    return make


@pytest.fixture
def db_url(backend, tmp_path) -> str:
    """URL of a migrated database with empty caravel tables."""
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'queue.sqlite'}"
        db = open_database(url)
        with db.connection_context():
            migrate(db)
        return url
    if backend not in _migrated:
        url = _server(backend).create()
        db = open_database(url)
        with db.connection_context():
            migrate(db)
        _migrated[backend] = url
    url = _migrated[backend]
    db = open_database(url)
    with db.connection_context():
        clear_tables(db)
    return url


@pytest.fixture
def db(db_url) -> Iterator[peewee.Database]:
    database = open_database(db_url)
    database.connect()
    try:
        yield database
    finally:
        if database.in_transaction():
            database.rollback()
        database.close()


@pytest.fixture
def connect(db_url) -> Iterator[Callable[[], peewee.Database]]:
    """Factory of extra connections to the same database (for threads)."""
    opened = []

    def make() -> peewee.Database:
        database = open_database(db_url)
        opened.append(database)
        return database
    yield make
    for database in opened:
        database.close()
