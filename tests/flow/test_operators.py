"""Operators see the keys whose jobs wait behind their limit: QueueAdmin.limited_keys,
``caravel-lite queues`` and ``stats``, and the dashboard's overview."""
from __future__ import annotations

import base64
import json

from caravel_lite import QueueAdmin
from caravel_lite.admin import LimitedKey
from caravel_lite.web import TokenAuth, wsgi_app
from tests.cli import procs
from tests.flow.jobs import QUEUE, Export, make_queue, registry, to


def _seed(db) -> None:
    queue = make_queue(db, registry(concurrency_limit=2))
    for i in range(5):
        queue.enqueue(Export(i), to("t", key="customer-1"))
    queue.enqueue(Export(9), to("t", key="customer-2"))
    assert len(queue.claim_many(QUEUE, 10)) == 3  # two of customer-1, one of customer-2


def test_the_admin_lists_keys_with_jobs_waiting(db):
    _seed(db)
    assert QueueAdmin(db).limited_keys() == (LimitedKey(QUEUE, "customer-1", 2, 3),)
    assert QueueAdmin(db).limited_keys(queue="other") == ()


def test_queues_and_stats_show_limited_keys(db, db_url):
    _seed(db)
    for command in ("queues", "stats"):
        result = procs.run(command, "--database", db_url, timeout=120)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        header = lines.index(next(line for line in lines if "LIMITED KEY" in line))
        assert lines[header + 1].split() == [QUEUE, "customer-1", "2", "3"]
    result = procs.run("queues", "--json", "--database", db_url, timeout=120)
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[-1] == {"queue_name": QUEUE, "key": "customer-1", "leased": 2, "waiting": 3}


def test_the_dashboard_overview_shows_limited_keys(db):
    from werkzeug.test import Client

    _seed(db)
    app = wsgi_app(QueueAdmin(db), auth=TokenAuth("t" * 32))
    auth = base64.b64encode(("ops:" + "t" * 32).encode()).decode()
    page = Client(app).get("/", headers={"Authorization": "Basic " + auth})
    text = page.get_data(as_text=True)
    assert page.status_code == 200, text[:500]
    assert "Limited keys waiting" in text and "customer-1" in text
