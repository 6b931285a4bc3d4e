"""Database URLs from the environment: CARAVEL_DATABASE_URL and CARAVEL_APP_DATABASE_URL
are the defaults of --database and --app-database; a flag given wins."""
from __future__ import annotations

import json

from caravel_lite import Dispatch, QueueOutbox
from tests.cli import procs
from tests.cli.app import QUEUE, TENANT, Note, registry


def test_migrate_and_check_read_the_database_from_the_environment(new_database):
    env = {"CARAVEL_DATABASE_URL": new_database()}
    pending = procs.run("check", env=env)
    assert pending.returncode == 1 and json.loads(pending.stdout)["pending_migrations"]
    assert "pending migrations" in procs.one_line(pending.stderr)
    done = procs.run("migrate", env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["applied"]
    again = procs.run("check", env=env)
    assert (again.returncode, json.loads(again.stdout)) == (0, {"pending_migrations": False})


def test_a_flag_wins_over_the_environment(db_url):
    done = procs.run("check", "--database", db_url, env={"CARAVEL_DATABASE_URL": "pgsql://x/y"})
    assert done.returncode == 0, done.stderr
    unusable = procs.run("check", env={"CARAVEL_DATABASE_URL": "pgsql://x/y"})
    assert unusable.returncode == 2


def test_the_relay_reads_both_databases_from_the_environment(db, db_url):
    with db.atomic():
        staged = QueueOutbox(db, registry).stage(Note("from the outbox"),
                                                 Dispatch(QUEUE, TENANT, "env-1"))
    done = procs.run("relay", "tests.cli.app:registry", "--once",
                     env={"CARAVEL_APP_DATABASE_URL": db_url, "CARAVEL_DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["marked"] == 1
    rows = db.execute_sql("SELECT id FROM caravel_jobs").fetchall()
    assert [row[0] for row in rows] == [str(staged.outbox_id)]


def test_help_names_the_variables_and_never_prints_their_values():
    secret_url = "postgresql://app:s3cr3t-in-env@db.invalid/app"
    for command in ("migrate", "worker", "relay"):
        done = procs.run(command, "--help", env={"CARAVEL_DATABASE_URL": secret_url,
                                                  "CARAVEL_APP_DATABASE_URL": secret_url})
        assert done.returncode == 0
        assert "$CARAVEL_DATABASE_URL" in done.stdout
        assert "s3cr3t" not in done.stdout + done.stderr
    relay = procs.run("relay", "--help")
    assert "$CARAVEL_APP_DATABASE_URL" in relay.stdout


def test_a_password_from_the_environment_is_masked_in_errors():
    done = procs.run("migrate", env={"CARAVEL_DATABASE_URL":
                                     "postgresql://app:env-secret-77@db.invalid"})
    assert done.returncode == 2
    assert "env-secret-77" not in done.stderr and "app:***@" in done.stderr
