"""What an operator copies from one command into the next: ids that tell jobs apart and
that ``show`` takes back (whole or their beginning), ``queues --queue``, ``--state`` in
the words the tables print, and one name for the job type (the wire name). Separate
processes, on every database."""
from __future__ import annotations

import json
import uuid
from typing import List

import pytest

from caravel_lite import DatabaseQueue, Dispatch, Failure, QueueOptions
from tests.cli import procs
from tests.scheduler.jobs import QUEUE, TENANT, Tick, registry


def cli(db_url: str, *args: str):
    return procs.run(*args, "--database", db_url, timeout=120)


def ok(db_url: str, *args: str) -> str:
    done = cli(db_url, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


def enqueue(db, n: int, queue: str = QUEUE) -> List[str]:
    """``n`` jobs made within the same few milliseconds (one minute, surely)."""
    q = DatabaseQueue(db, registry)
    return [str(q.enqueue(Tick(i), Dispatch(queue=queue, tenant_id=TENANT)).job_id)
            for i in range(n)]


def dead_letter(db) -> str:
    q = DatabaseQueue(db, registry, QueueOptions(max_attempts=1))
    job_id = str(q.enqueue(Tick(99), Dispatch(queue="mail", tenant_id=TENANT)).job_id)
    lease = q.claim("mail")
    assert lease is not None and str(lease.job_id) == job_id
    try:
        raise TimeoutError("the handler's own words")
    except TimeoutError as exc:
        assert q.fail(lease, Failure.HANDLER_FAILED, error=exc)
    return job_id


def test_the_jobs_table_shows_whole_ids_that_show_takes_back(db, db_url):
    made = enqueue(db, 3)
    rows = [line.split()[0] for line in ok(db_url, "jobs").splitlines()[1:]]
    assert sorted(rows) == sorted(made)  # whole ids, each one different
    for job_id in made:
        assert ok(db_url, "show", job_id).splitlines()[0].split() == ["job", job_id]


def test_show_takes_a_whole_id_in_the_forms_replay_and_delete_take(db, db_url):
    (job_id,) = enqueue(db, 1)
    for written in ("{" + job_id + "}", f"urn:uuid:{job_id}", job_id.upper()):
        assert json.loads(ok(db_url, "show", written, "--json"))["job_id"] == job_id, written


def test_show_takes_the_unique_beginning_of_an_id(db, db_url):
    made = enqueue(db, 3)
    first = made[0]
    # The shortest beginning that only this job's id has, with or without hyphens.
    length = next(n for n in range(1, 37)
                  if sum(other.startswith(first[:n]) for other in made) == 1)
    for prefix in (first[:length], first[:length].replace("-", ""), first[:length].upper(),
                   first[:length + 3]):
        shown = json.loads(ok(db_url, "show", prefix, "--json"))
        assert shown["job_id"] == first, prefix
    shared = first[:8]  # the creation time: every job of the minute begins alike
    ambiguous = cli(db_url, "show", shared)
    assert ambiguous.returncode == 2, ambiguous.stderr
    line = procs.one_line(ambiguous.stderr)
    assert line.startswith(f"caravel-lite show: {shared} begins the ids of several jobs (")
    assert line.endswith("): give more of the id")
    assert sum(job_id in line for job_id in made) == 3
    unknown = "f" * 12
    missing = cli(db_url, "show", unknown)
    assert missing.returncode == 1
    assert procs.one_line(missing.stderr) == (
        f"caravel-lite show: no job whose id begins with {unknown}")
    nobody = str(uuid.uuid4())
    assert cli(db_url, "show", nobody).returncode == 1
    for bad in ("xyz", "", "0" * 33):
        refused = cli(db_url, "show", bad)
        assert refused.returncode == 2, bad
        assert "argument JOB_ID: not a job id or the beginning of one" in refused.stderr


def test_queues_shows_one_queue_with_queue(db, db_url):
    enqueue(db, 2, queue="reports")
    enqueue(db, 1, queue="mail")
    rows = [json.loads(line) for line in ok(db_url, "queues", "--json").splitlines()]
    assert sorted(r["queue_name"] for r in rows) == ["mail", "reports"]
    (only,) = [json.loads(line) for line in
               ok(db_url, "queues", "--queue", "reports", "--json").splitlines()]
    assert only["queue_name"] == "reports" and only["ready"] == 2
    table = ok(db_url, "queues", "--queue", "mail").splitlines()
    assert len(table) == 2 and table[1].split()[:2] == ["mail", "1"]


def test_state_takes_dead_as_the_queues_table_prints_it(db, db_url):
    dead = dead_letter(db)
    enqueue(db, 1)
    assert " DEAD " in ok(db_url, "queues").splitlines()[0]
    ids = [json.loads(line)["job_id"] for line in
           ok(db_url, "jobs", "--state", "dead", "--json").splitlines()]
    assert ids == [dead]
    assert ok(db_url, "jobs", "--state", "dead") == ok(db_url, "jobs", "--state", "dead_letter")
    assert "0 job(s) would be pruned" in ok(db_url, "prune", "--older-than", "1d",
                                            "--states", "completed,dead", "--dry-run")


def test_the_job_type_is_the_wire_name_everywhere_on_the_command_line(db, db_url):
    dead = dead_letter(db)
    assert "WIRE NAME" in ok(db_url, "jobs").splitlines()[0]
    shown = ok(db_url, "show", dead)
    assert "wire name        scheduled.tick.v1" in shown
    history = shown.split("failure history", 1)[1].splitlines()
    headers = history[1].split()
    assert "EXCEPTION" in headers and "TYPE" not in headers  # the exception's, not the job's
    assert "TimeoutError" in history[2]
    for command in ("jobs", "replay", "stats", "queues", "show", "prune"):
        text = procs.run(command, "--help").stdout.lower()
        assert "job type" not in text, command
    assert "--wire-name" in procs.run("jobs", "--help").stdout
