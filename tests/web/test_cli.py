"""``caravel-lite dashboard`` as a subprocess, on every database: the loopback rule,
authentication from the environment only, the database from CARAVEL_DATABASE_URL."""
from __future__ import annotations

import base64
import os
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Dict, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
TOKEN = "cli-test-token-0123456789"


def _env(**extra: str) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARAVEL_DASHBOARD_")}
    env.pop("CARAVEL_DATABASE_URL", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    env.update(extra)
    return env


def run(*args: str, env: Dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "caravel_lite", "dashboard", *args],
                          env=env, capture_output=True, text=True, timeout=60)


class Served:
    def __init__(self, *args: str, env: Dict[str, str]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "caravel_lite", "dashboard", *args], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.line = self.process.stdout.readline()
        if "serving http://" not in self.line:
            self.process.kill()
            raise AssertionError((self.line, self.process.stderr.read()))
        self.url = self.line.split("serving ")[1].split()[0]

    def get(self, path: str, authorization: Optional[str] = None,
            data: Optional[bytes] = None) -> int:
        host, port = self.url.split("//")[1].rstrip("/").rsplit(":", 1)
        # Whatever address it listens on, this machine reaches it on loopback.
        target = f"http://127.0.0.1:{port}{path}"
        request = urllib.request.Request(target, data=data)
        if authorization:
            request.add_header("Authorization", authorization)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code

    def stop(self) -> int:
        self.process.terminate()
        return self.process.wait(timeout=10)


def test_refuses_a_public_bind_without_authentication(db_url):
    result = run("--database", db_url, "--bind", "0.0.0.0:0", env=_env())
    assert result.returncode == 2
    assert "not a loopback address" in result.stderr
    assert "CARAVEL_DASHBOARD_TOKEN" in result.stderr
    assert result.stdout == ""


def test_serves_a_public_bind_with_a_token_from_the_environment(db_url):
    served = Served("--bind", "0.0.0.0:0",
                    env=_env(CARAVEL_DATABASE_URL=db_url, CARAVEL_DASHBOARD_TOKEN=TOKEN))
    try:
        assert "actions enabled" in served.line and "payloads hidden" in served.line
        assert served.get("/") == 401
        assert served.get("/", f"Bearer {TOKEN}") == 200
        basic = base64.b64encode(f"ops:{TOKEN}".encode()).decode()
        assert served.get("/jobs", f"Basic {basic}") == 200
    finally:
        assert served.stop() == 0


def test_read_only_refuses_actions_even_with_authentication(db_url):
    served = Served("--database", db_url, "--read-only", "--bind", "127.0.0.1:0",
                    env=_env(CARAVEL_DASHBOARD_TOKEN=TOKEN))
    try:
        assert "read-only" in served.line
        assert served.get("/", f"Bearer {TOKEN}") == 200
        form = f"job_id={uuid.uuid4()}&confirmed=1".encode()
        assert served.get("/actions/replay", f"Bearer {TOKEN}", data=form) == 403
    finally:
        assert served.stop() == 0


def test_loopback_without_authentication_only_shows(db_url):
    served = Served("--database", db_url, "--bind", "127.0.0.1:0", "--show-payloads",
                    env=_env())
    try:
        assert "view only" in served.line and "payloads shown" in served.line
        assert served.get("/") == 200 and served.get("/dead-letters") == 200
    finally:
        assert served.stop() == 0


def test_credentials_never_come_from_the_command_line(db_url):
    for flag in ("--token", "--password", "--user"):
        result = run("--database", db_url, flag, TOKEN, env=_env())
        assert result.returncode == 2 and "unrecognized arguments" in result.stderr


def test_bad_configuration_is_a_usage_error_naming_it(db_url):
    result = run("--database", db_url, env=_env(CARAVEL_DASHBOARD_TOKEN="short"))
    assert result.returncode == 2 and "CARAVEL_DASHBOARD_TOKEN" in result.stderr
    result = run("--database", db_url, "--bind", "localhost", env=_env())
    assert result.returncode == 2 and "HOST:PORT" in result.stderr
    result = run("--bind", "127.0.0.1:0", env=_env())
    assert result.returncode == 2 and "CARAVEL_DATABASE_URL" in result.stderr


@pytest.mark.backends("sqlite")
def test_unmigrated_database_is_a_fault(backend, tmp_path):
    result = run("--database", f"sqlite:///{tmp_path / 'empty.sqlite'}", "--bind",
                 "127.0.0.1:0", env=_env())
    assert result.returncode == 1 and "migrat" in result.stderr
