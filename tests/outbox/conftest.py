"""Fixtures for the outbox suite: an application database and a queue database that
are either the same database (``same``) or two databases (``separate``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List

import peewee
import pytest

from caravel_lite import migrate
from caravel_lite.dialect import open_database
from tests.databases import clear_tables

_separate_queue_urls: Dict[str, str] = {}

INVOICE_TABLE = "outbox_test_invoice"


def invoice_model(db: peewee.Database):
    """A business table of the application, bound to ``db``."""
    class Invoice(peewee.Model):
        number = peewee.IntegerField()

        class Meta:
            database = db
            table_name = INVOICE_TABLE
    return Invoice


@dataclass
class Databases:
    topology: str
    app_url: str
    queue_url: str
    app: peewee.Database
    queue: peewee.Database
    opened: List[peewee.Database] = field(default_factory=list)

    def open_app(self) -> peewee.Database:
        """Another Database object (its own connections) on the application database."""
        db = open_database(self.app_url)
        self.opened.append(db)
        return db

    def open_queue(self) -> peewee.Database:
        db = open_database(self.queue_url)
        self.opened.append(db)
        return db

    def intents(self) -> int:
        return self.app.execute_sql("SELECT COUNT(*) FROM caravel_outbox").fetchone()[0]

    def jobs(self) -> List[str]:
        return [row[0] for row in
                self.queue.execute_sql("SELECT id FROM caravel_jobs ORDER BY id").fetchall()]

    def invoices(self) -> int:
        return self.app.execute_sql(f"SELECT COUNT(*) FROM {INVOICE_TABLE}").fetchone()[0]


def _queue_url(backend: str, new_database: Callable[[], str]) -> str:
    """A migrated second database; server ones are made once per session and emptied."""
    if backend == "sqlite":
        url = new_database()
        fresh = True
    else:
        fresh = backend not in _separate_queue_urls
        if fresh:
            _separate_queue_urls[backend] = new_database()
        url = _separate_queue_urls[backend]
    db = open_database(url)
    with db.connection_context():
        if fresh:
            migrate(db)
        else:
            clear_tables(db)
    return url


@pytest.fixture(params=["same", "separate"])
def dbs(request, backend, db, db_url, new_database):
    """App and queue databases, connected; the invoice table exists and is empty."""
    Invoice = invoice_model(db)
    db.create_tables([Invoice], safe=True)
    db.execute_sql(f"DELETE FROM {INVOICE_TABLE}")
    if request.param == "same":
        pair = Databases("same", db_url, db_url, db, db)
    else:
        queue_url = _queue_url(backend, new_database)
        queue_db = open_database(queue_url)
        queue_db.connect()
        pair = Databases("separate", db_url, queue_url, db, queue_db)
        pair.opened.append(queue_db)
    yield pair
    for opened in pair.opened:
        opened.close()


@pytest.fixture
def app(backend, db):
    """Only the application database (for staging tests that never relay)."""
    Invoice = invoice_model(db)
    db.create_tables([Invoice], safe=True)
    db.execute_sql(f"DELETE FROM {INVOICE_TABLE}")
    return db
