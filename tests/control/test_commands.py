"""The control commands as an operator runs them (separate processes): cancel by id and
by filter, pause and resume, queues showing the pause, workers."""
from __future__ import annotations

import json
import time

import pytest

from caravel_lite import DatabaseQueue, Dispatch, JobState, QueueAdmin
from tests.cli import procs
from tests.control.app import OTHER, QUEUE, TENANT, Quick, registry


def cli(db_url, *args):
    done = procs.run(*args, "--database", db_url, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_cancel_by_id_and_by_filter(db, db_url):
    queue = DatabaseQueue(db, registry)
    ids = [queue.enqueue(Quick(n), Dispatch(queue=QUEUE, tenant_id=TENANT)).job_id
           for n in range(3)]
    other = queue.enqueue(Quick(9), Dispatch(queue=OTHER, tenant_id=TENANT)).job_id
    code, out, err = cli(db_url, "cancel", str(ids[0]))
    assert code == 0 and out.strip() == f"{ids[0]} cancelled", err
    code, out, _ = cli(db_url, "cancel", "--queue", QUEUE, "--dry-run", "--json")
    assert code == 0 and json.loads(out) == {"cancelled": 2, "dry_run": True}
    code, out, _ = cli(db_url, "cancel", "--queue", QUEUE)
    assert code == 0 and "2" in out
    states = {QueueAdmin(db).job(j).state for j in ids}
    assert states == {JobState.CANCELLED}
    assert QueueAdmin(db).job(other).state is JobState.PENDING
    code, out, _ = cli(db_url, "jobs", "--state", "cancelled")
    assert code == 0 and len(out.strip().splitlines()) == 4  # a header and three jobs


def test_pause_resume_and_queues(db, db_url):
    DatabaseQueue(db, registry).enqueue(Quick(1), Dispatch(queue=QUEUE, tenant_id=TENANT))
    code, out, _ = cli(db_url, "pause", QUEUE)
    assert code == 0 and out.strip() == f"{QUEUE} paused"
    code, out, _ = cli(db_url, "queues")
    header, row = out.strip().splitlines()
    assert header.split()[-1] == "PAUSED" and row.split()[-1] == "paused"
    code, out, _ = cli(db_url, "resume", QUEUE, "--json")
    assert json.loads(out) == {"queue": QUEUE, "resumed": True, "changed": True}
    assert QueueAdmin(db).paused() == set()


@pytest.mark.backends("sqlite")  # argument checks: before any database is opened
def test_control_commands_refuse_bad_arguments(db_url):
    code, _, err = cli(db_url, "cancel")
    assert code == 2 and "--all" in err
    code, _, err = cli(db_url, "pause", "Bad Name")
    assert code == 2 and "queue" in err
    code, out, _ = cli(db_url, "cancel", "01a2347e-caac-7000-a9c4-9abb4bff1824")
    assert code == 1 and "no such job" in out


def test_workers_lists_the_heartbeat_rows(db, db_url):
    from caravel_lite.heartbeats import Heartbeats

    an_hour_ago = int(time.time() * 1000) - 3_600_000
    Heartbeats(db).register("00aa11bb22cc33dd", [QUEUE, OTHER], 4, an_hour_ago)
    code, out, _ = cli(db_url, "workers")
    header, row = out.strip().splitlines()
    assert header.split()[0] == "WORKER"
    assert row.split()[:6] == ["00aa11bb22cc33dd", row.split()[1], row.split()[2],
                               f"{QUEUE},{OTHER}", "4", "0"]
    assert row.split()[-1] == "LOST"  # its last beat is an hour old
    code, out, _ = cli(db_url, "workers", "--json")
    assert json.loads(out)["queues"] == [QUEUE, OTHER]
