"""The OpenMetrics figures of the queue database (issue 28, caravel_lite.metrics) on
every database: exact values of each family for a seeded scenario, no tenant unless
opted in, no connection held between scrapes, the family functions as the extension
point, and /metrics under the dashboard's authentication rules (the dashboard's route,
the standalone endpoint and ``caravel-lite metrics``)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Dict, Tuple

import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from werkzeug.test import Client

from caravel_lite import (DatabaseQueue, Dispatch, Failure, InvalidField,
                          JobRegistry, Priority, QueueAdmin, QueueOptions)
from caravel_lite.metrics import DEFAULT_FAMILIES, MetricsEndpoint, QueueMetrics
from caravel_lite.testing import ManualClock
from caravel_lite.web import Dashboard, DashboardSettings, TokenAuth

TOKEN = "metrics-token-long-enough"
REMOTE = "203.0.113.9"


@dataclass(frozen=True)
class Task:
    n: int


def _queue(db: Any, clock: ManualClock) -> DatabaseQueue:
    registry = JobRegistry()
    registry.register("tests.task.v1", Task, lambda job, ctx: None)
    return DatabaseQueue(db, registry, QueueOptions(max_attempts=2,
                                                    lease_duration=timedelta(seconds=30),
                                                    retry_delay=timedelta(seconds=1)),
                         clock=clock)


def _put(queue: DatabaseQueue, name: str, tenant: str = "tenant-a", **more: Any) -> Any:
    return queue.enqueue(Task(1), Dispatch(queue=name, tenant_id=tenant, **more)).job_id


def _seed(db: Any) -> ManualClock:
    """Queue "mail": 2 ready (since 86 s), 1 delayed, 1 leased, 1 lease expired, 1 dead
    letter (handler_failed twice), 2 completed (one 30 s ago, one 10 min ago). Queue
    "bills": 1 ready of another tenant (since 5 s), 1 completed 2 h ago. Each job
    claimed right after its enqueue is HIGH priority, so the claim takes it."""
    clock = ManualClock()
    start = clock()
    now = start + timedelta(hours=2)
    q = _queue(db, clock)
    first = {"priority": Priority.HIGH}
    _put(q, "bills", "tenant-b")
    assert q.complete(q.claim("bills"))
    clock.set(now - timedelta(minutes=10))
    _put(q, "mail")
    assert q.complete(q.claim("mail"))
    clock.set(now - timedelta(seconds=90))
    _put(q, "mail")
    for _ in range(2):                            # dead letter: two failed attempts
        assert q.fail(q.claim("mail"), Failure.HANDLER_FAILED)
        clock.advance(timedelta(seconds=2))
    _put(q, "mail")                               # ready since 86 s
    _put(q, "mail")
    clock.set(now - timedelta(seconds=30))
    _put(q, "mail", **first)
    assert q.complete(q.claim("mail"))
    _put(q, "mail", **first)
    q.claim("mail")                               # leased for 30 s: expired at "now"
    clock.set(now - timedelta(seconds=5))
    _put(q, "mail", **first)
    q.claim("mail")                               # leased, live
    _put(q, "mail", not_before=start + timedelta(hours=3))   # delayed
    _put(q, "bills", "tenant-b")
    clock.set(now)
    return clock


def _families(text: bytes) -> Dict[str, Dict[Tuple[Tuple[str, str], ...], float]]:
    out: Dict[str, Dict[Tuple[Tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def _series(values: Dict[Tuple[Tuple[str, str], ...], float]) -> Dict[Tuple[str, ...], float]:
    return {tuple(v for _, v in labels): value for labels, value in values.items()}


def test_each_family_counts_the_seeded_jobs_exactly(db):
    clock = _seed(db)
    metrics = QueueMetrics(db, clock=clock)
    text = metrics.render()
    assert text.endswith(b"# EOF\n")
    found = _families(text)
    jobs = _series(found["caravel_jobs"])
    assert {k: v for k, v in jobs.items() if k[0] == "mail"} == {
        ("mail", "ready"): 2, ("mail", "delayed"): 1, ("mail", "leased"): 1,
        ("mail", "lease_expired"): 1, ("mail", "dead_letter"): 1}
    assert jobs[("bills", "ready")] == 1
    assert _series(found["caravel_oldest_ready_job_age_seconds"]) == {
        ("mail",): 86.0, ("bills",): 5.0}
    assert _series(found["caravel_jobs_completed_recent"]) == {
        ("mail", "1m"): 1, ("mail", "1h"): 2}
    assert _series(found["caravel_attempts_failed_recent"]) == {
        ("handler_failed", "mail", "1m"): 0, ("handler_failed", "mail", "1h"): 2}
    assert _series(found["caravel_jobs_dead_lettered_recent"]) == {
        ("handler_failed", "mail", "1m"): 0, ("handler_failed", "mail", "1h"): 1}
    # Claimed at once, but the dead letter's second attempt 1 s after its retry was due.
    assert _series(found["caravel_pickup_latency_seconds"]) == {
        ("0.5", "mail"): 0.0, ("0.95", "mail"): 1.0}
    assert found["caravel_metrics_read_seconds"][()] >= 0
    assert b"tenant" not in text


def test_the_tenant_label_is_opt_in_and_only_on_job_counts(db):
    clock = _seed(db)
    found = _families(QueueMetrics(db, clock=clock, tenant_label=True).render())
    jobs = _series(found["caravel_jobs"])
    assert jobs[("bills", "ready", "tenant-b")] == 1
    assert jobs[("mail", "ready", "tenant-a")] == 2
    assert all("tenant_id" not in dict(labels) for name, values in found.items()
               if name != "caravel_jobs" for labels in values)
    with pytest.raises(InvalidField, match="tenant_label"):
        QueueMetrics(db, tenant_label="yes")


def test_a_scrape_holds_no_connection_after_it(db):
    _seed(db)
    db.close()
    metrics = QueueMetrics(db)
    metrics.render()
    assert db.is_closed()
    db.connect()
    metrics.render()  # a connection the caller holds is the caller's
    assert not db.is_closed()


def test_families_are_small_functions_a_collector_is_given(db):
    def workers_alive(reading):
        family = GaugeMetricFamily("caravel_workers_alive", "Workers alive", labels=["queue"])
        for name in reading.queue_names():
            family.add_metric([name], 0)
        yield family

    clock = _seed(db)
    found = _families(QueueMetrics(db, clock=clock,
                                   families=(*DEFAULT_FAMILIES, workers_alive)).render())
    assert _series(found["caravel_workers_alive"]) == {("bills",): 0, ("mail",): 0}


def test_workers_are_counted_by_queue_and_heartbeat(db):
    from caravel_lite.heartbeats import LOST_BEATS, Heartbeats, BEAT

    clock = _seed(db)
    now_ms = int(clock().timestamp() * 1000)
    beats = Heartbeats(db)
    beats.register("a" * 16, ["mail", "bills"], 4, now_ms)
    beats.register("b" * 16, ["mail"], 2, now_ms - int((LOST_BEATS + 1) * BEAT * 1000))
    found = _families(QueueMetrics(db, clock=clock).render())
    assert _series(found["caravel_workers"]) == {("bills", "alive"): 1, ("mail", "alive"): 1,
                                                 ("mail", "lost"): 1}
    beats.remove("a" * 16)
    found = _families(QueueMetrics(db, clock=clock).render())
    assert _series(found["caravel_workers"]) == {("mail", "lost"): 1}


def _get(app: Any, remote: str = "127.0.0.1", **headers: str) -> Any:
    return Client(app).get("/metrics", headers={"Host": "localhost", **headers},
                           environ_base={"REMOTE_ADDR": remote})


def test_the_dashboard_answers_metrics_under_its_authentication(db):
    admin = QueueAdmin(db, clock=_seed(db))
    dashboard = Dashboard(admin, DashboardSettings(auth=TokenAuth(TOKEN)))
    assert _get(dashboard).status_code == 401
    answer = _get(dashboard, REMOTE, Authorization=f"Bearer {TOKEN}")
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("application/openmetrics-text")
    assert b"caravel_jobs{" in answer.data
    local_only = Dashboard(admin, DashboardSettings(insecure_no_auth=True))
    assert _get(local_only, REMOTE).status_code == 403
    assert _get(local_only).status_code == 200


def test_the_standalone_endpoint_keeps_the_dashboard_rules(db):
    metrics = QueueMetrics(db, clock=_seed(db))
    with pytest.raises(InvalidField) as info:
        MetricsEndpoint(metrics)
    assert info.value.field == "auth"
    guarded = MetricsEndpoint(metrics, auth=TokenAuth(TOKEN))
    assert _get(guarded, REMOTE).status_code == 401
    assert _get(guarded, REMOTE, Authorization=f"Bearer {TOKEN}").status_code == 200
    local = MetricsEndpoint(metrics, insecure_no_auth=True)
    assert _get(local, REMOTE).status_code == 403
    assert _get(local, "127.0.0.1", **{"X-Forwarded-For": REMOTE}).status_code == 403
    assert _get(local).status_code == 200
    assert Client(local).get("/other", headers={"Host": "localhost"},
                             environ_base={"REMOTE_ADDR": "127.0.0.1"}).status_code == 404


def test_a_database_error_fails_the_scrape_with_503(db, caplog):
    metrics = QueueMetrics(db, families=(lambda reading: reading.admin.db.execute_sql(
        "SELECT * FROM no_such_table").fetchall(),))
    assert _get(MetricsEndpoint(metrics, insecure_no_auth=True)).status_code == 503


@pytest.mark.backends("sqlite")
def test_the_command_serves_metrics_on_loopback_and_refuses_elsewhere_without_auth(db_url, db):
    _seed(db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARAVEL_DASHBOARD_")}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    command = [sys.executable, "-m", "caravel_lite", "metrics", "--database", db_url]
    refused = subprocess.run(command + ["--bind", "0.0.0.0:0"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "CARAVEL_DASHBOARD_TOKEN" in refused.stderr
    server = subprocess.Popen(command + ["--bind", "127.0.0.1:0"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        url = line.split("serving ")[1].split(" ")[0]
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200
            assert b"caravel_jobs{" in answer.read()
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
