"""``caravel-lite delete`` and ``discard`` by filter, as a user runs them (separate
processes) on every database: the set-based QueueAdmin actions behind them, raced by
an operator's replay in the test process."""
from __future__ import annotations

import json

from caravel_lite import Failure, JobState, QueueAdmin
from caravel_lite.testing import ManualClock
from tests.admin import races
from tests.admin.seed import START, seed
from tests.cli import procs


def cli(db_url, *args):
    return procs.run(*args, "--database", db_url, timeout=120)


def ok(db_url, *args):
    result = cli(db_url, *args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def test_delete_and_discard_by_filter(db_url, db):
    seeded = seed(db)
    admin = QueueAdmin(db)
    assert json.loads(ok(db_url, "delete", "--queue", "mail", "--dry-run", "--json").stdout) \
        == {"deleted": 2, "dry_run": True}
    assert ok(db_url, "delete", "--queue", "mail", "--tenant", "tenant-a").stdout.strip() \
        == "1 dead letter(s) deleted"
    assert admin.job(seeded.ids[("mail", "tenant-a", "dead")]) is None
    assert admin.job(seeded.ids[("mail", "tenant-b", "dead")]) is not None
    assert ok(db_url, "delete", "--state", "completed", "--queue", "reports").stdout.strip() \
        == "2 completed job(s) deleted"
    refused = cli(db_url, "delete", "--state", "pending", "--queue", "mail")
    assert refused.returncode == 2 and "state" in refused.stderr
    assert ok(db_url, "discard", "--queue", "reports", "--tenant", "tenant-b").stdout.strip() \
        == "2 pending job(s) discarded"
    for category in ("ready", "delayed"):
        job = admin.job(seeded.ids[("reports", "tenant-b", category)])
        assert (job.state, job.last_failure) == (JobState.DEAD_LETTER, Failure.DISCARDED)
        assert admin.job(seeded.ids[("reports", "tenant-a", category)]).state \
            is JobState.PENDING
    assert json.loads(ok(db_url, "discard", "--all", "--json").stdout)["discarded"] == 6
    for command in ("delete", "discard"):
        nothing = cli(db_url, command)
        assert nothing.returncode == 2 and "--all" in nothing.stderr
        both = cli(db_url, command, str(seeded.ids[("mail", "tenant-b", "dead")]),
                   "--queue", "mail")
        assert both.returncode == 2 and "not both" in both.stderr


COUNT = 3000


def test_delete_by_filter_racing_a_replay_keeps_every_replayed_job(db_url, db):
    clock = ManualClock(START)
    older = races.dead_letters(db, clock, COUNT)
    process = procs.start("delete", "--queue", races.RACE_QUEUE, "--json",
                          "--database", db_url)
    try:
        race = races.replay_during(db, clock, COUNT, older, lambda: process.poll() is None)
    finally:
        code, out, err = procs.finish(process, timeout=120)
    assert code == 0, err
    races.check_outcome(db, COUNT, json.loads(out)["deleted"], race)
