"""Every command fails with one line and the right exit code, and never prints a
password, even one that the database driver's own message quotes."""
from __future__ import annotations

import secrets
import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from caravel_lite.dialect import open_database
from tests.cli import procs
from tests.databases import SERVER_URLS

REGISTRY = "tests.cli.app:registry"
COMMANDS = ("migrate", "check", "worker", "relay")


def arguments(command: str, url: str) -> list:
    """``command`` pointed at ``url`` for every database it takes (a worker that does
    not wait out an outage: these tests are about the first failure)."""
    if command == "worker":
        return ["worker", REGISTRY, "--queue", "cli-work", "--database", url,
                "--max-outage", "0"]
    if command == "relay":
        return ["relay", REGISTRY, "--app-database", url, "--database", url,
                "--max-outage", "0"]
    return [command, "--database", url]


def with_credentials(url: str, user: str, password: str, database: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, f"{user}:{password}@{host}", "/" + database, "", ""))


def failing_url(backend: str, tmp_path, secret: str) -> str:
    """A URL that is well formed but fails when used, with ``secret`` as its password
    and in a place the server's refusal quotes back."""
    if backend == "postgres":
        # Trust authentication ignores the password; the server then names the missing
        # database, which is spelled like the password.
        return with_credentials(SERVER_URLS["postgres"], "postgres", secret, secret)
    if backend == "mysql":
        # The refusal names the user, which is spelled like the password.
        return with_credentials(SERVER_URLS["mysql"], secret, secret, "test")
    return f"sqlite:///{tmp_path / 'no-such-directory' / 'queue.sqlite'}"


def driver_message(url: str) -> str:
    db = open_database(url)
    try:
        db.connect()
    except Exception as exc:  # what the driver says, unmasked
        return str(exc)
    finally:
        if not db.is_closed():
            db.close()
    raise AssertionError(f"{url} unexpectedly connected")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_database_that_fails_exits_1_with_one_line_and_no_password(backend, tmp_path,
                                                                     command):
    secret = "caravel_secret_" + secrets.token_hex(4)
    url = failing_url(backend, tmp_path, secret)
    if backend != "sqlite":
        assert secret in driver_message(url)  # so the masking below is really tested
    done = procs.run(*arguments(command, url))
    assert done.returncode == 1, done.stderr
    line = procs.one_line(done.stderr)
    assert f"caravel-lite {command}: " in line and "Traceback" not in line
    assert "Error" in line  # the driver's error class names what happened
    assert secret not in done.stdout + done.stderr
    if backend != "sqlite":
        assert "***" in line
    assert not (tmp_path / "no-such-directory").exists()


@pytest.mark.backends("postgres", "mysql")
@pytest.mark.parametrize("switch", ["--debug", "CARAVEL_DEBUG"])
def test_debug_shows_the_traceback_still_masked(backend, tmp_path, switch):
    secret = "caravel_secret_" + secrets.token_hex(4)
    url = failing_url(backend, tmp_path, secret)
    if switch == "--debug":
        done = procs.run("--debug", "migrate", "--database", url)
        after = procs.run("migrate", "--database", url, "--debug")
        assert after.returncode == 1 and "Traceback" in after.stderr
    else:
        done = procs.run("migrate", "--database", url, env={"CARAVEL_DEBUG": "1"})
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert done.stderr.strip().splitlines()[-1].startswith("caravel-lite migrate: ")
    assert secret not in done.stdout + done.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_scheme_exits_2_with_one_line(command):
    done = procs.run(*arguments(command, "pgsql://x/y"))
    assert done.returncode == 2, done.stderr
    line = procs.one_line(done.stderr)
    assert 'Unrecognized or unsupported scheme: "pgsql"' in line
    assert line.startswith(f"caravel-lite {command}: --")
    assert done.stdout == ""


@pytest.mark.parametrize("command", COMMANDS)
def test_a_url_without_a_database_name_exits_2_and_masks_its_password(command):
    done = procs.run(*arguments(command, "postgresql://app:hunter2secret@db.invalid"))
    assert done.returncode == 2, done.stderr
    line = procs.one_line(done.stderr)
    assert "no database name" in line and "postgresql://app:***@db.invalid" in line
    assert "hunter2secret" not in done.stdout + done.stderr


@pytest.mark.parametrize("argv, expected", [
    (["migrate"], "--database is required (or set CARAVEL_DATABASE_URL)"),
    (["relay", REGISTRY, "--database", "sqlite:///q.db"],
     "--app-database is required (or set CARAVEL_APP_DATABASE_URL)"),
    (["worker", REGISTRY, "--database", "sqlite:///q.db"],
     "the following arguments are required: --queue"),
    (["worker", REGISTRY, "--queue", "q", "--prefetch", "many"],
     "argument --prefetch: invalid int value: 'many'"),
    (["worker", REGISTRY, "--queue", "Not A Queue"], "queue: "),
    (["worker", REGISTRY, "--queue", "q", "--prefetch", "0", "--database", "sqlite:///q.db"],
     "prefetch"),
    (["worker", "no_such_module:registry", "--queue", "q"],
     "cannot import 'no_such_module'"),
    (["worker", "tests.cli.app:missing", "--queue", "q"], "has no attribute 'missing'"),
    (["worker", "tests.cli.app", "--queue", "q"], "expected MODULE:ATTR"),
    (["worker", "tests.cli.app:make_nothing", "--queue", "q"], "is a int; expected"),
    (["worker", "tests.cli.app:Note", "--queue", "q"], "is a type; expected"),
    (["relay", REGISTRY, "--app-database", "sqlite:///a.db", "--batch-size", "5000"],
     "argument --batch-size: must be between 1 and"),
    (["nonsense"], "invalid choice: 'nonsense'"),
    ([], "the following arguments are required: COMMAND"),
])
def test_bad_arguments_exit_2_with_one_line(argv, expected, tmp_path):
    done = procs.run(*argv)
    assert done.returncode == 2, done.stderr
    line = procs.one_line(done.stderr)
    assert expected in line and line.startswith("caravel-lite")
    assert list(tmp_path.iterdir()) == []


def test_a_module_that_fails_on_import_is_a_fault_not_a_usage_error():
    done = procs.run("worker", "tests.cli.broken_app:registry", "--queue", "q",
                     "--database", "sqlite:///unused.db")
    assert done.returncode == 1
    assert procs.one_line(done.stderr) == (
        "caravel-lite worker: RuntimeError: the application module is broken")


def test_a_worker_that_cannot_reach_its_database_exits_1_after_max_outage():
    url = "postgresql://postgres@127.0.0.1:9/nowhere"  # nothing listens: refused
    done = procs.run("worker", REGISTRY, "--queue", "cli-work", "--database", url,
                     "--max-outage", "1")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert "database unavailable (OperationalError); retrying for up to 1 s" in lines[0]
    assert lines[-1].startswith("caravel-lite worker: database unavailable for longer than "
                                "--max-outage: OperationalError: "), done.stderr


def unopenable_sqlite(command: str, url: str) -> list:
    """``command`` on ``url`` with its default --max-outage (60 s)."""
    if command == "worker":
        return ["worker", REGISTRY, "--queue", "cli-work", "--database", url]
    if command == "relay":
        return ["relay", REGISTRY, "--app-database", url, "--database", url]
    return ["scheduler", "tests.scheduler.jobs:build_scheduler"]


@pytest.mark.parametrize("command", ["worker", "relay", "scheduler"])
def test_a_sqlite_file_that_cannot_be_opened_ends_the_command_at_once(tmp_path, command):
    # No server will come back to fix a path: waiting out --max-outage is pointless.
    url = f"sqlite:///{tmp_path / 'no-such-directory' / 'queue.sqlite'}"
    started = time.monotonic()
    done = procs.run(*unopenable_sqlite(command, url), env={"CARAVEL_DATABASE_URL": url},
                     timeout=120)
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    line = procs.one_line(done.stderr)  # one line: no outage warning before it
    assert line.startswith(f"caravel-lite {command}: {command} faulted: OperationalError: "
                           "unable to open database file"), done.stderr
    assert elapsed < 30, f"waited {elapsed:.0f} s as for an outage"
    assert not (tmp_path / "no-such-directory").exists()


@pytest.mark.parametrize("value", ["-1", "1e9", "nan"])
def test_every_long_running_command_refuses_the_same_max_outage_values(value):
    """The worker, the relay and the scheduler read --max-outage alike: a value their
    loops would refuse (negative, over a week, nan) is an exit 2 naming the flag,
    before any database is opened."""
    never = "sqlite:///never-opened.db"
    for command in (arguments("worker", never)[:-2], arguments("relay", never)[:-2],
                    ["scheduler", "tests.scheduler.jobs:build_scheduler"]):
        done = procs.run(*command, "--max-outage", value)
        assert done.returncode == 2, (command[0], done.stderr)
        line = procs.one_line(done.stderr)
        assert line.startswith(f"caravel-lite {command[0]}: --max-outage must be "), line


@pytest.mark.parametrize("argv, flag", [
    (["prune", "--older-than", "99999999999999d"], "--older-than"),
    (["jobs", "--since", "99999999999999d"], "--since"),
    (["jobs", "--until", "99999999999999w"], "--until"),
    (["queues", "--since", "5300w"], "--since"),
    (["worker", REGISTRY, "--queue", "q", "--prune-after", "99999999999999d"], "--prune-after"),
])
def test_a_duration_out_of_range_exits_2_naming_the_flag(argv, flag, tmp_path):
    url = f"sqlite:///{tmp_path / 'never-opened.db'}"
    done = procs.run(*argv, "--database", url)
    assert done.returncode == 2, done.stderr
    line = procs.one_line(done.stderr)
    assert f"argument {flag}: " in line and "out of range: at most 36500d" in line, line
    assert "OverflowError" not in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flag, value", [("--lease-seconds", "1e300"),
                                         ("--renew-seconds", "1e300"),
                                         ("--lease-seconds", "nan")])
def test_worker_seconds_out_of_range_exit_2_naming_the_flag(flag, value, tmp_path):
    url = f"sqlite:///{tmp_path / 'never-opened.db'}"
    done = procs.run("worker", REGISTRY, "--queue", "q", flag, value, "--database", url)
    assert done.returncode == 2, done.stderr
    line = procs.one_line(done.stderr)
    assert f"argument {flag}: " in line and "out of range" in line, line
    assert list(tmp_path.iterdir()) == []
