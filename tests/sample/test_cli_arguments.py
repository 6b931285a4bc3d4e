"""Flag parsing, usage errors and settings validation (no worker, mostly no database)."""
from __future__ import annotations

import pytest

from caravel_lite.sample.config import ConfigError, from_environment

from tests.sample.helpers import run_in_process


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in ("CARAVEL_WORKER_DIRECTORY", "CARAVEL_WORKER_DATABASE_URL",
                 "CARAVEL_WORKER_RESULTS_URL", "CARAVEL_WORKER_LEASE_SECONDS",
                 "CARAVEL_WORKER_CRASH_AFTER_RESULT", "CARAVEL_SMOKE_SIGTERM_READY",
                 "CARAVEL_SMOKE_SIGTERM_CANCELLED"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("argv", [[], ["--report", "--migrate"], ["--bogus"], ["report"],
                                  ["--help"], ["--work-once", "extra"]])
def test_anything_but_exactly_one_known_flag_prints_usage_and_exits_2(argv):
    code, out, err = run_in_process(argv)
    assert code == 2
    assert out == ""
    assert "usage: python -m caravel_lite.sample FLAG" in err


@pytest.mark.parametrize("value, problem", [
    (None, "is not set"), ("relative/dir", "absolute"), ("/no/such/caravel/dir", "no existing")])
def test_the_data_directory_must_be_an_existing_absolute_path(monkeypatch, value, problem):
    if value is not None:
        monkeypatch.setenv("CARAVEL_WORKER_DIRECTORY", value)
    code, out, err = run_in_process(["--report"])
    assert (code, out) == (2, "")
    assert "CARAVEL_WORKER_DIRECTORY" in err and problem in err


@pytest.mark.parametrize("raw", ["0", "3601", "-5", "abc", "1.5", "60s"])
def test_lease_seconds_outside_1_to_3600_is_rejected(tmp_path, raw):
    with pytest.raises(ConfigError, match="CARAVEL_WORKER_LEASE_SECONDS"):
        from_environment({"CARAVEL_WORKER_DIRECTORY": str(tmp_path),
                          "CARAVEL_WORKER_LEASE_SECONDS": raw})


@pytest.mark.parametrize("raw, seconds", [(None, 60), ("1", 1), ("3600", 3600), (" 90 ", 90)])
def test_lease_seconds_default_and_bounds(tmp_path, raw, seconds):
    env = {"CARAVEL_WORKER_DIRECTORY": str(tmp_path)}
    if raw is not None:
        env["CARAVEL_WORKER_LEASE_SECONDS"] = raw
    assert from_environment(env).lease_seconds == seconds


@pytest.mark.parametrize("env, message", [
    ({"CARAVEL_WORKER_CRASH_AFTER_RESULT": "yes"}, "CARAVEL_WORKER_CRASH_AFTER_RESULT"),
    ({"CARAVEL_WORKER_RESULTS_URL": "postgresql://u@h/db"}, "needs CARAVEL_WORKER_DATABASE_URL"),
    ({"CARAVEL_WORKER_DATABASE_URL": "sqlite:///queue.db"}, "postgresql://"),
    ({"CARAVEL_SMOKE_SIGTERM_READY": "/no/such/caravel/dir/ready"}, "SIGTERM_READY"),
])
def test_invalid_settings_are_named(tmp_path, env, message):
    with pytest.raises(ConfigError, match=message):
        from_environment(dict(env, CARAVEL_WORKER_DIRECTORY=str(tmp_path)))


def test_server_urls_replace_the_directory_and_results_share_the_queue_database():
    url = "postgresql://postgres@127.0.0.1:5432/example"
    config = from_environment({"CARAVEL_WORKER_DATABASE_URL": url})
    assert (config.directory, config.queue_url, config.results_url) == (None, url, url)
    assert from_environment({"CARAVEL_WORKER_DATABASE_URL": url,
                             "CARAVEL_WORKER_RESULTS_URL": "mysql://root@h/r"}
                            ).results_url == "mysql://root@h/r"


def test_crash_hook_is_on_only_for_1(tmp_path):
    base = {"CARAVEL_WORKER_DIRECTORY": str(tmp_path)}
    assert from_environment(dict(base, CARAVEL_WORKER_CRASH_AFTER_RESULT="1")).crash_after_result
    assert not from_environment(dict(base, CARAVEL_WORKER_CRASH_AFTER_RESULT="0")
                                ).crash_after_result


@pytest.mark.parametrize("flag", ["--work", "--work-once", "--enqueue-demo", "--report"])
def test_commands_on_an_unmigrated_directory_exit_1_and_create_nothing(monkeypatch, tmp_path,
                                                                       flag):
    monkeypatch.setenv("CARAVEL_WORKER_DIRECTORY", str(tmp_path))
    code, out, err = run_in_process([flag])
    assert (code, out) == (1, "")
    assert "--migrate" in err
    assert list(tmp_path.iterdir()) == []


def test_check_model_reports_what_is_pending_then_passes_after_migrate(monkeypatch, tmp_path):
    monkeypatch.setenv("CARAVEL_WORKER_DIRECTORY", str(tmp_path))
    code, out, _ = run_in_process(["--check-model"])
    assert code == 1
    assert '"pending_migrations": true' in out and "0001_create_results" in out
    assert run_in_process(["--migrate"])[0] == 0
    assert run_in_process(["--check-model"]) == (0, '{"pending_migrations": false}\n', "")
    assert run_in_process(["--migrate"]) == (0, '{"applied": []}\n', "")
