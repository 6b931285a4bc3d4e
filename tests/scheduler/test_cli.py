"""``caravel-lite scheduler``, ``caravel-lite schedules`` and ``worker --scheduler`` as
subprocesses, the way an operator runs them."""
from __future__ import annotations

import json
import signal
from datetime import timedelta

import pytest

from caravel_lite import DatabaseQueue, Dispatch, JobState, QueueScheduler
from tests.cli import procs
from tests.scheduler.jobs import QUEUE, TENANT, Tick, job_count, keys, registry
from tests.support import wait_for

TARGET = "tests.scheduler.jobs:build_scheduler"

pytestmark = pytest.mark.slow  # real processes


def states(db) -> list:
    return [row[0] for row in db.execute_sql("SELECT state FROM caravel_jobs").fetchall()]


def test_the_scheduler_command_enqueues_each_slot_until_sigterm(db, db_url):
    process = procs.start("scheduler", TARGET, env={"CARAVEL_DATABASE_URL": db_url})
    try:
        wait_for(lambda: job_count(db) >= 2, timeout=60, message="two heartbeat slots")
        process.send_signal(signal.SIGTERM)
    finally:
        code, out, err = procs.finish(process)
    assert code == 0, err
    assert "Traceback" not in err
    slots = sorted(int(k.rsplit(":", 1)[1]) for k in keys(db))
    assert all(k.startswith("schedule:heartbeat:1000:") for k in keys(db))
    assert slots == list(range(slots[0], slots[0] + len(slots)))


def test_once_enqueues_what_is_due_and_prints_how_many(db, db_url):
    env = {"CARAVEL_DATABASE_URL": db_url}
    first = procs.run("scheduler", TARGET, "--once", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"enqueued": 1}  # the heartbeat; the nightly is not due
    again = procs.run("scheduler", TARGET, "--once", env=env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["enqueued"] in (0, 1)  # 1 only if a second went by
    assert job_count(db) == len(set(keys(db)))


def test_schedules_lists_the_last_slot_from_the_database_and_the_next_run(db, db_url):
    # Enqueue the current heartbeat slot in this process, as a running scheduler would.
    here = QueueScheduler(DatabaseQueue(db, registry))
    here.every("heartbeat", timedelta(seconds=1), Tick(1), queue=QUEUE, tenant_id=TENANT)
    here.run_once()
    env = {"CARAVEL_DATABASE_URL": db_url}
    listed = procs.run("schedules", TARGET, "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    heartbeat, nightly = [json.loads(line) for line in listed.stdout.splitlines()]
    assert heartbeat["name"] == "heartbeat" and heartbeat["timezone"] == "UTC"
    assert heartbeat["last_slot"]["key"] in keys(db)
    assert heartbeat["last_slot"]["state"] == JobState.PENDING.value
    assert heartbeat["next_run"].endswith("Z")
    assert nightly["last_slot"] is None
    assert nightly["schedule"] == "cron '0 2 * * *' in Europe/Berlin"
    assert nightly["next_run_local"][11:19] == "02:00:00"
    assert nightly["next_run_local"][-6:] in ("+01:00", "+02:00")
    text = procs.run("schedules", TARGET, env=env)
    assert text.returncode == 0, text.stderr
    assert "heartbeat: every 0:00:01, queue scheduled, tenant tenant-a" in text.stdout
    assert "last slot: none in the last 1000 slots" in text.stdout
    assert "Europe/Berlin" in text.stdout
    assert job_count(db) == 1  # read-only


def test_worker_runs_the_schedules_beside_the_jobs(db, db_url):
    process = procs.start("worker", "tests.scheduler.jobs:registry", "--queue", QUEUE,
                          "--poll-interval", "0.1", "--scheduler", TARGET,
                          env={"CARAVEL_DATABASE_URL": db_url})
    try:
        wait_for(lambda: states(db).count(JobState.COMPLETED.value) >= 2, timeout=60,
                 message="two scheduled jobs run by the worker")
        process.send_signal(signal.SIGTERM)
    finally:
        code, out, err = procs.finish(process)
    assert code == 0, err
    assert all(k.startswith("schedule:heartbeat:") for k in keys(db))


def test_worker_exits_1_when_the_schedulers_database_is_not_migrated(db_url, new_database):
    code = procs.run("worker", "tests.scheduler.jobs:registry", "--queue", QUEUE,
                     "--scheduler", "tests.scheduler.jobs:scheduler_from_env",
                     env={"CARAVEL_DATABASE_URL": db_url, "SCHEDULER_TEST_URL": new_database()})
    assert code.returncode == 1
    assert procs.one_line(code.stderr).startswith("caravel-lite worker: ")


def test_an_unmigrated_database_exits_1(new_database):
    unmigrated = procs.run("schedules", TARGET, env={"CARAVEL_DATABASE_URL": new_database()})
    assert unmigrated.returncode == 1
    assert procs.one_line(unmigrated.stderr).startswith("caravel-lite schedules: ")


def test_bad_targets_and_arguments_exit_2():
    for command in ("scheduler", "schedules"):
        for target in ("tests.scheduler.jobs:not_a_scheduler", "tests.scheduler.nowhere:x",
                       "no-colon"):
            result = procs.run(command, target)
            assert result.returncode == 2, (command, target, result.stderr)
            assert procs.one_line(result.stderr).startswith(f"caravel-lite {command}: ")
    for bad in ("-1", "1e9"):
        result = procs.run("scheduler", TARGET, "--max-outage", bad)
        assert result.returncode == 2, result.stderr
        assert "--max-outage" in procs.one_line(result.stderr)


def test_the_password_of_the_schedulers_database_is_masked():
    url = "postgresql://postgres:s3cret-Pa55@127.0.0.1:9/nowhere"
    result = procs.run("scheduler", TARGET, "--once", env={"CARAVEL_DATABASE_URL": url})
    assert result.returncode == 1
    assert "s3cret-Pa55" not in result.stderr + result.stdout
    assert procs.one_line(result.stderr).startswith("caravel-lite scheduler: ")


def test_an_unreachable_database_is_waited_for_up_to_max_outage():
    url = "postgresql://postgres:s3cret-Pa55@127.0.0.1:9/nowhere"
    env = {"CARAVEL_DATABASE_URL": url}
    waited = procs.run("scheduler", TARGET, "--max-outage", "1", env=env)
    assert waited.returncode == 1
    line = procs.one_line(waited.stderr.splitlines()[-1])
    assert line.startswith("caravel-lite scheduler: database unavailable for longer than "
                           "--max-outage: ")
    warnings = [l for l in waited.stderr.splitlines()[:-1] if "retrying for up to" in l]
    assert len(warnings) == 1  # the outage's one warning
    assert "s3cret-Pa55" not in waited.stderr
    at_once = procs.run("scheduler", TARGET, "--max-outage", "0", env=env)
    assert at_once.returncode == 1
    assert procs.one_line(at_once.stderr).startswith("caravel-lite scheduler: scheduler faulted: ")


def test_a_pruning_worker_must_keep_its_schedules_keys(db, db_url):
    env = {"CARAVEL_DATABASE_URL": db_url}
    command = ("worker", "tests.scheduler.jobs:registry", "--queue", QUEUE,
               "--scheduler", "tests.scheduler.jobs:scheduler_with_catch_up")
    refused = procs.run(*command, "--prune-after", "1h", env=env)
    assert refused.returncode == 2, refused.stderr
    line = procs.one_line(refused.stderr)
    assert line.startswith("caravel-lite worker: --prune-after 1:00:00 is shorter than 2:00:00")
    assert job_count(db) == 0  # refused before anything ran
    process = procs.start(*command, "--prune-after", "2h", env=env)  # long enough
    try:
        wait_for(lambda: job_count(db) > 0, timeout=60, message="the schedules running")
        process.send_signal(signal.SIGTERM)
    finally:
        code, out, err = procs.finish(process)
    assert code == 0, err


def _finished_jobs(db, n: int) -> None:
    queue = DatabaseQueue(db, registry)
    for i in range(n):
        queue.enqueue(Tick(i), Dispatch(queue=QUEUE, tenant_id=TENANT))
    while (lease := queue.claim(QUEUE)) is not None:
        assert queue.complete(lease)


def test_prune_with_the_scheduler_refuses_an_age_that_would_run_slots_again(db, db_url):
    _finished_jobs(db, 3)
    env = {"CARAVEL_DATABASE_URL": db_url}
    schedules = ("--scheduler", "tests.scheduler.jobs:scheduler_with_catch_up")
    refused = procs.run("prune", "--older-than", "1m", *schedules, env=env)
    assert refused.returncode == 2, refused.stderr
    assert procs.one_line(refused.stderr) == (
        "caravel-lite prune: --older-than 0:01:00 is shorter than 2:00:00, the longest "
        "interval or catch-up window of the schedules on every queue: a pruned slot would "
        "run again")
    assert job_count(db) == 3  # nothing deleted
    # A queue without schedules takes any age; the schedules' own takes 2h and more.
    other = procs.run("prune", "--older-than", "1m", "--queue", "other", *schedules, env=env)
    assert other.returncode == 0, other.stderr
    enough = procs.run("prune", "--older-than", "2h", "--json", *schedules, env=env)
    assert enough.returncode == 0, enough.stderr
    assert json.loads(enough.stdout) == {"pruned": 0, "dry_run": False}
    # Without --scheduler no schedule is known: the age is taken as given
    # (docs/how-to/operating.md).
    unchecked = procs.run("prune", "--older-than", "0s", "--json", env=env)
    assert unchecked.returncode == 0, unchecked.stderr
    assert json.loads(unchecked.stdout)["pruned"] == 3
