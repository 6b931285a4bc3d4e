"""``worker MODULE:ATTR`` as a subprocess: the target may be a JobRegistry (queue opened
on --database or $CARAVEL_DATABASE_URL, default options), the application's
DatabaseQueue (its database and options used), or a callable returning either."""
from __future__ import annotations

import argparse
import signal

import pytest

from caravel_lite import DatabaseQueue, Dispatch, Failure, JobState
from caravel_lite.cli import common
from tests.cli import procs
from tests.cli.app import QUEUE, TENANT, URL_ENV, Note, registry
from tests.support import wait_for

# Over the application's 64-byte limit, far under the default 64 KiB.
LONG = Note("x" * 200)


def run_worker_until(queue: DatabaseQueue, target: str, job_id, env: dict,
                     finished) -> tuple:
    process = procs.start("worker", target, "--queue", QUEUE, "--poll-interval", "0.1",
                          env=env)
    try:
        wait_for(lambda: finished(queue.status(job_id, QUEUE, TENANT)), timeout=30,
                 message=f"the worker on {target} to handle the job")
        process.send_signal(signal.SIGTERM)
    finally:
        code, out, err = procs.finish(process)
    return code, err


def test_a_registry_gets_the_environment_database_and_default_options(db, db_url):
    queue = DatabaseQueue(db, registry)
    job_id = queue.enqueue(LONG, Dispatch(QUEUE, TENANT)).job_id
    code, err = run_worker_until(queue, "tests.cli.app:registry", job_id,
                                 {"CARAVEL_DATABASE_URL": db_url},
                                 lambda found: found.state is JobState.COMPLETED)
    assert code == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("target", ["tests.cli.app:queue", "tests.cli.app:make_queue"])
def test_a_queue_or_a_factory_brings_its_own_database_and_options(db, db_url, target):
    queue = DatabaseQueue(db, registry)
    job_id = queue.enqueue(LONG, Dispatch(QUEUE, TENANT)).job_id
    # A URL in CARAVEL_DATABASE_URL that would fail if it were used instead.
    code, err = run_worker_until(queue, target, job_id,
                                 {URL_ENV: db_url, "CARAVEL_DATABASE_URL": "pgsql://x/y"},
                                 lambda found: found.last_failure is not None)
    assert code == 0, err
    # The application's 64-byte payload limit applied: the handler was never called.
    assert queue.status(job_id, QUEUE, TENANT).last_failure is Failure.INVALID_PAYLOAD


@pytest.mark.parametrize("flag", [["--database", "sqlite:///ignored.db"],
                                  ["--lease-seconds", "30"], ["--renew-seconds", "5"]])
def test_a_queue_refuses_flags_it_would_ignore(flag, tmp_path):
    done = procs.run("worker", "tests.cli.app:make_queue", "--queue", QUEUE, *flag,
                     env={URL_ENV: f"sqlite:///{tmp_path / 'app.db'}"})
    assert done.returncode == 2
    line = procs.one_line(done.stderr)
    assert "is a DatabaseQueue" in line and flag[0] in line


def test_the_loaded_queue_is_the_applications_object_itself(monkeypatch, tmp_path):
    """Database, options and telemetry are the application's: it is the same object."""
    monkeypatch.setenv(URL_ENV, f"sqlite:///{tmp_path / 'app.db'}")
    import tests.cli.app as app
    monkeypatch.setattr(app, "queue", app.make_queue())
    args = argparse.Namespace(database=None)
    assert common.load_queue(args, "tests.cli.app:queue") is app.queue
    made = common.load_queue(args, "tests.cli.app:make_queue")
    assert isinstance(made, DatabaseQueue) and made.options.max_payload_bytes == 64
