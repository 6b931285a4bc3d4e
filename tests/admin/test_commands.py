"""The operator commands as a user runs them (separate processes) on every database
seeded with a job in every state for two tenants and two queues: queues, jobs, show,
replay, discard, delete, prune, stats; --json output parses; text from the database
never reaches the terminal raw; --dry-run leaves a SQLite file byte-identical."""
from __future__ import annotations

import hashlib
import json
import os
import pty
import subprocess
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from caravel_lite import Dispatch, Failure, JobState, QueueAdmin
from caravel_lite.ids import new_id
from tests.admin.seed import Mail, make_queue, seed
from tests.cli import procs

EVIL = "evil\x1b[2J\x1b]0;owned\x07\u202e"


@pytest.fixture
def seeded(db):
    now = datetime.now(timezone.utc)
    start = now.replace(microsecond=now.microsecond // 1000 * 1000) - timedelta(seconds=5)
    return seed(db, start=start, lease=timedelta(hours=1))


def cli(db_url, *args, env=None):
    return procs.run(*args, "--database", db_url, env=env, timeout=120)


def ok(db_url, *args):
    result = cli(db_url, *args)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_queues_one_row_per_queue(db_url, seeded):
    rows = json_lines(ok(db_url, "queues", "--json").stdout)
    assert [r["queue_name"] for r in rows] == ["mail", "reports"]
    for r in rows:
        assert (r["ready"], r["delayed"], r["leased"], r["expired"], r["dead_letter"],
                r["completed"]) == (2, 2, 2, 2, 2, 2)
        assert r["oldest_ready_age"] >= 0
    text = ok(db_url, "queues").stdout.splitlines()
    assert text[0].split() == ["QUEUE", "READY", "DELAYED", "LEASED", "EXPIRED", "DEAD",
                               "COMPLETED", "OLDEST", "READY", "PAUSED"]
    assert text[1].split()[:7] == ["mail", "2", "2", "2", "2", "2", "2"]


def test_jobs_filters_pages_and_payloads(db_url, seeded):
    rows = json_lines(ok(db_url, "jobs", "--json", "--limit", "100").stdout)
    assert [r["job_id"] for r in rows] == sorted(map(str, seeded.all), reverse=True)
    assert all("payload" not in r for r in rows)
    dead = json_lines(ok(db_url, "jobs", "--json", "--state", "dead_letter",
                         "--tenant", "tenant-b").stdout)
    assert sorted(r["job_id"] for r in dead) == sorted(
        str(j) for j in seeded.where(category="dead", tenant="tenant-b"))
    failed = json_lines(ok(db_url, "jobs", "--json", "--queue", "mail",
                           "--failure", "handler_failed").stdout)
    assert {r["job_id"] for r in failed} == {str(j) for j in seeded.where(
        category="dead", queue="mail")}
    first = ok(db_url, "jobs", "--json", "--limit", "5")
    page = json_lines(first.stdout)
    assert len(page) == 5 and f"--after {page[-1]['job_id']}" in first.stderr
    second = json_lines(ok(db_url, "jobs", "--json", "--limit", "100", "--after",
                           page[-1]["job_id"]).stdout)
    assert [r["job_id"] for r in page + second] == [r["job_id"] for r in rows]
    payloads = json_lines(ok(db_url, "jobs", "--json", "--show-payload", "--queue",
                             "reports", "--state", "completed").stdout)
    assert all(r["payload"].startswith('{"n":') for r in payloads) and len(payloads) == 2
    table = ok(db_url, "jobs", "--queue", "mail", "--state", "pending").stdout
    assert len(table.splitlines()) == 1 + 4 and "payload" not in table.lower()
    assert ok(db_url, "jobs", "--since", "1h", "--json").stdout.count("\n") == len(seeded.all)
    assert ok(db_url, "jobs", "--until", "1h", "--json").stdout == ""


def test_show_envelope_and_failure_history(db_url, db, seeded):
    queue = make_queue(db, seeded.clock, max_attempts=2)
    job_id = queue.enqueue(Mail(7), Dispatch(queue="smtp", tenant_id="tenant-a",
                                             idempotency_key="order-7")).job_id
    try:
        raise ConnectionRefusedError("smtp.example.com refused password s3cret")
    except ConnectionRefusedError as exc:
        error = exc
    lease = queue.claim("smtp")
    assert lease.job_id == job_id and queue.fail(lease, Failure.HANDLER_FAILED, error=error)
    shown = json.loads(ok(db_url, "show", str(job_id), "--json").stdout)
    assert shown["state"] == "pending" and shown["idempotency_key"] == "order-7"
    assert "payload" not in shown
    (record,) = shown["failures"]
    assert record["error_type"] == "ConnectionRefusedError" and record["attempt"] == 1
    assert record["site"].startswith(__name__ + ":test_show_envelope_and_failure_history:")
    text = ok(db_url, "show", str(job_id)).stdout
    assert "ConnectionRefusedError" in text and "handler_failed" in text
    assert "s3cret" not in text and '{"n":7}' not in text
    assert '{"n":7}' in ok(db_url, "show", str(job_id), "--show-payload").stdout
    missing = cli(db_url, "show", str(uuid.uuid4()))
    assert missing.returncode == 1 and "no job" in missing.stderr
    bad = cli(db_url, "show", "not-a-job")
    assert bad.returncode == 2 and "not a job id" in bad.stderr


def test_replay_by_id_and_by_filter(db_url, db, seeded):
    admin = QueueAdmin(db)
    one = str(seeded.ids[("mail", "tenant-a", "dead")])
    done = str(seeded.ids[("mail", "tenant-a", "completed")])
    result = cli(db_url, "replay", one, done)
    assert result.returncode == 1
    assert f"{one} replayed" in result.stdout and f"{done} not replayed" in result.stdout
    assert "1 of 2" in result.stderr
    assert admin.job(one).state is JobState.PENDING
    plan = json.loads(ok(db_url, "replay", "--queue", "reports", "--dry-run", "--json").stdout)
    assert plan == {"replayed": 2, "dry_run": True}
    assert ok(db_url, "replay", "--queue", "reports", "--failure", "handler_failed",
              "--since", "1h").stdout.strip() == "2 dead letter(s) replayed"
    assert json.loads(ok(db_url, "replay", "--all", "--json").stdout)["replayed"] == 1
    refused = cli(db_url, "replay")
    assert refused.returncode == 2 and "--all" in refused.stderr
    both = cli(db_url, "replay", one, "--queue", "mail")
    assert both.returncode == 2


def test_discard_and_delete_by_id(db_url, db, seeded):
    admin = QueueAdmin(db)
    ready = str(seeded.ids[("reports", "tenant-b", "ready")])
    live = str(seeded.ids[("reports", "tenant-b", "live")])
    dry = ok(db_url, "discard", ready, "--dry-run")
    assert f"{ready} would be discarded" in dry.stdout
    assert admin.job(ready).state is JobState.PENDING
    rows = json_lines(ok(db_url, "discard", ready, "--json").stdout)
    assert rows == [{"job_id": ready, "discarded": True, "dry_run": False,
                     "state": "pending"}]
    assert admin.job(ready).last_failure is Failure.DISCARDED
    refused = cli(db_url, "delete", live)
    assert refused.returncode == 1 and "leased" in refused.stdout
    assert admin.job(live) is not None
    assert ok(db_url, "delete", ready).stdout.strip() == f"{ready} deleted"
    assert admin.job(ready) is None


def test_prune_reports_progress_as_plain_lines_when_piped(db_url, db, seeded):
    result = ok(db_url, "prune", "--older-than", "0s", "--batch-size", "3")
    assert result.stdout.strip() == "8 job(s) pruned"
    assert result.stderr.splitlines() == ["8 job(s) to prune", "batch 1: 3 of 8 deleted",
                                          "batch 2: 4 of 8 deleted",
                                          "batch 3: 7 of 8 deleted",
                                          "batch 4: 8 of 8 deleted"]
    assert "\r" not in result.stderr
    assert json.loads(ok(db_url, "prune", "--older-than", "0s", "--json").stdout) == {
        "pruned": 0, "dry_run": False}
    assert len(QueueAdmin(db).jobs(limit=100)) == len(seeded.all) - 8


def test_prune_without_a_batch_size_takes_the_databases(db_url, seeded):
    # 100 on SQLite, 1000 elsewhere: each state's 4 old jobs go in one batch.
    result = ok(db_url, "prune", "--older-than", "0s")
    assert result.stderr.splitlines() == ["8 job(s) to prune", "batch 1: 4 of 8 deleted",
                                          "batch 2: 8 of 8 deleted"]


def test_prune_draws_a_bar_on_a_terminal(db_url, seeded):
    leader, follower = pty.openpty()
    try:
        process = subprocess.Popen(
            procs.command("prune", "--older-than", "0s", "--batch-size", "2",
                          "--database", db_url),
            env=procs.environment(), cwd=procs.ROOT, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=follower)
        os.close(follower)
        follower = -1
        out, _ = process.communicate(timeout=120)
        chunks = []
        while True:
            try:
                data = os.read(leader, 4096)
            except OSError:  # the terminal closed once the process ended
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(leader)
        if follower != -1:
            os.close(follower)
    assert process.returncode == 0
    bar = b"".join(chunks).decode()
    assert "\r[" in bar and "100%" in bar and "8/8" in bar
    assert out.decode().strip() == "8 job(s) pruned"


def test_stats_figures_and_chart(db_url, seeded):
    data = json.loads(ok(db_url, "stats", "--json", "--tenants").stdout)
    assert [q["queue_name"] for q in data["queues"]] == ["mail", "reports"]
    assert sum(m["completed"] for m in data["per_minute"]) == 4
    assert data["pickup_p50"] == 0.04 and data["pickup_sample"] == 8
    assert len(data["tenants"]) == 4
    text = ok(db_url, "stats", "--queue", "mail").stdout
    lines = text.splitlines()
    chart = [line for line in lines if line.startswith(("completed ", "failed "))]
    assert len(chart) == 2 and all(any(c in line for c in "▁▂▃▄▅▆▇█") for line in chart)
    assert "pickup latency p50 40ms" in text


def _insert_raw_evil_job(db) -> str:
    """A row no current caravel_lite would write (tenants may not hold control
    characters): as if written by another tool or an older version."""
    now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    job_id = str(new_id())
    row = dict(id=job_id, queue="mail", tenant_id=EVIL, wire_name="test.mail.v1",
               payload='{"n":1}', priority=2, available_at=now_ms, max_attempts=3,
               state="dead_letter", enqueued_at=now_ms, attempts=3, renewals=0,
               replay_count=0, updated_at=now_ms, finished_at=now_ms,
               last_failure="handler_failed")
    marks = ", ".join([db.param] * len(row))
    db.execute_sql(f"INSERT INTO caravel_jobs ({', '.join(row)}) VALUES ({marks})",
                   tuple(row.values()))
    db.execute_sql(
        "INSERT INTO caravel_failures (job_id, seq, queue, failed_at, attempt, replays, "
        "category, error_type, site, description) VALUES "
        f"({', '.join([db.param] * 10)})",
        (job_id, 1, "mail", now_ms, 3, 0, "handler_failed", "x\x1b[31m.Error",
         "m:f\x1b[1A:1", "text\x1b]8;;http://x\x07link"))
    return job_id


def test_text_from_the_database_never_reaches_the_terminal_raw(db_url, db, seeded):
    job_id = _insert_raw_evil_job(db)
    for args in (("jobs",), ("jobs", "--state", "dead_letter"), ("show", job_id),
                 ("stats", "--tenants"), ("replay", job_id, "--dry-run")):
        result = ok(db_url, *args)
        for stream in (result.stdout, result.stderr):
            assert "\x1b" not in stream and "\x07" not in stream and "\u202e" not in stream
    shown = ok(db_url, "show", job_id).stdout
    assert "evil\\x1b[2J\\x1b]0;owned\\x07\\u202e" in shown
    assert "x\\x1b[31m.Error" in shown and "text\\x1b]8;;http://x\\x07link" in shown
    # JSON carries the exact text, escaped by JSON itself
    raw = ok(db_url, "show", job_id, "--json").stdout
    assert "\x1b" not in raw and json.loads(raw)["tenant_id"] == EVIL


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.backends("sqlite")
def test_dry_runs_leave_the_sqlite_file_byte_identical(db_url, db, seeded):
    db.close()
    path = Path(db_url[len("sqlite:///"):])
    files = sorted(p.name for p in path.parent.iterdir())
    before = _digest(path)
    dead = str(seeded.ids[("mail", "tenant-a", "dead")])
    ready = str(seeded.ids[("mail", "tenant-a", "ready")])
    for args in (("replay", "--all", "--dry-run"), ("replay", dead, "--dry-run"),
                 ("discard", ready, "--dry-run"), ("delete", ready, "--dry-run"),
                 ("prune", "--older-than", "0s", "--dry-run"), ("queues",), ("jobs",),
                 ("show", dead), ("stats",)):
        ok(db_url, *args)
        assert _digest(path) == before, args
    assert "4 dead letter(s) would be replayed" in ok(db_url, "replay", "--all",
                                                      "--dry-run").stdout
    assert sorted(p.name for p in path.parent.iterdir()) == files


@pytest.mark.parametrize("args, message", [
    (("jobs", "--state", "running"), "expected one of"),
    (("jobs", "--limit", "0"), "limit"),
    (("jobs", "--since", "yesterday"), "expected a duration"),
    (("prune", "--older-than", "7d", "--states", "pending"), "states"),
    (("prune",), "--older-than"),
    (("stats", "--queue", "Not A Queue"), "queue"),
])
def test_bad_arguments_exit_2_with_one_line(db_url, seeded, args, message):
    result = cli(db_url, *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_the_database_comes_from_the_environment_and_must_be_migrated(db_url, seeded,
                                                                      new_database):
    result = procs.run("queues", "--json", env={"CARAVEL_DATABASE_URL": db_url})
    assert result.returncode == 0 and len(json_lines(result.stdout)) == 2
    missing = procs.run("jobs")
    assert missing.returncode == 2 and "CARAVEL_DATABASE_URL" in missing.stderr
    empty = procs.run("jobs", "--database", new_database())
    assert empty.returncode == 1 and "pending migrations" in empty.stderr


@pytest.mark.backends("sqlite")
def test_an_unreachable_database_is_exit_1_with_one_line_and_no_password(db_url):
    url = "postgresql://operator:pa55-w0rd@127.0.0.1:1/queue"
    for command in ("queues", "jobs", "stats", "prune"):
        args = (command, "--database", url) + (("--older-than", "7d") if command == "prune"
                                                 else ())
        result = procs.run(*args)
        assert result.returncode == 1, (command, result.stderr)
        assert "pa55-w0rd" not in result.stdout + result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert result.stderr.startswith(f"caravel-lite {command}: database error")


def test_delete_by_id_in_the_state_listed_keeps_a_job_replayed_since(db_url, db, seeded):
    """An operator lists the dead letters, another replays one, the first deletes it
    by id: with ``--state dead`` it is kept (pending now), exit 1 saying why."""
    admin = QueueAdmin(db)
    dead = str(seeded.ids[("mail", "tenant-a", "dead")])
    completed = str(seeded.ids[("mail", "tenant-a", "completed")])
    assert admin.replay(dead)
    dry = cli(db_url, "delete", dead, "--state", "dead", "--dry-run")
    assert dry.returncode == 1 and f"{dead} not deleted (pending: not dead_letter)" in dry.stdout
    kept = cli(db_url, "delete", dead, "--state", "dead")
    assert kept.returncode == 1, (kept.stdout, kept.stderr)
    assert f"{dead} not deleted (pending: not dead_letter)" in kept.stdout
    assert admin.job(dead).state is JobState.PENDING
    assert ok(db_url, "delete", completed, "--state", "completed").stdout.strip() == (
        f"{completed} deleted")
    for args in (("--state", "leased"), ("--queue", "mail")):
        refused = cli(db_url, "delete", dead, *args)
        assert refused.returncode == 2, (args, refused.stderr)
    assert admin.job(dead) is not None
