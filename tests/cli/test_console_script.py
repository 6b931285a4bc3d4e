"""The console script ``caravel-lite``, installed from a wheel of this checkout into a
fresh virtual environment, does what ``python -m caravel_lite`` does."""
from __future__ import annotations

import configparser
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import peewee
import pytest

from caravel_lite import cli
from tests.cli import procs

IGNORED = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                 ".pytest_cache", ".tox", "*.pyc", ".venv", "venv")


def test_setup_cfg_declares_the_script_as_cli_main():
    config = configparser.ConfigParser()
    config.read(procs.ROOT / "setup.cfg")
    scripts = config["options.entry_points"]["console_scripts"].strip().splitlines()
    assert scripts == ["caravel-lite = caravel_lite.cli:main"]
    assert "caravel_lite.cli" in config["options"]["packages"].split()
    assert callable(cli.main)


def test_main_without_arguments_reads_sys_argv_as_the_script_wrapper_does(monkeypatch,
                                                                          capsys):
    monkeypatch.setattr(sys, "argv", ["caravel-lite", "check", "--database", "pgsql://x/y"])
    assert cli.main() == 2
    assert capsys.readouterr().err.startswith("caravel-lite check: --database: ")


def _build_wheel(tmp_path: Path) -> Path:
    source, dist = tmp_path / "source", tmp_path / "dist"
    shutil.copytree(procs.ROOT, source, ignore=IGNORED)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
               "--disable-pip-version-check", "-w", str(dist), str(source)]
    # Offline when this interpreter has the build tools; else pip fetches them.
    if all(importlib.util.find_spec(name) for name in ("setuptools", "wheel")):
        command.insert(4, "--no-build-isolation")
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = dist.glob("*.whl")
    return wheel


@pytest.mark.slow
def test_the_installed_script_migrates_and_checks(tmp_path):
    wheel = _build_wheel(tmp_path)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps",
                           "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    # The library's one dependency from this interpreter (installing it would need the
    # network); caravel_lite itself comes only from the wheel.
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "test_dependencies.pth").write_text(os.path.dirname(peewee.__file__) + "\n")
    script = env_dir / "bin" / "caravel-lite"
    assert script.exists()
    url = f"sqlite:///{tmp_path / 'queue.sqlite'}"
    env = {"CARAVEL_DATABASE_URL": url}
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    environment = procs.environment(env)
    del environment["PYTHONPATH"]  # nothing from the checkout

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(script), *args], env=environment, cwd=outside,
                              capture_output=True, text=True, timeout=120)

    where = subprocess.run([str(python), "-c", "import caravel_lite; print(caravel_lite.__file__)"],
                           env=environment, cwd=outside, capture_output=True, text=True,
                           timeout=60)
    assert where.stdout.strip().startswith(str(env_dir)), where.stdout + where.stderr
    assert run("check").returncode == 1
    migrated = run("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert json.loads(migrated.stdout)["applied"]
    checked = run("check")
    assert (checked.returncode, json.loads(checked.stdout)) == (0, {"pending_migrations": False})
    unusable = run("relay", "x:y", "--app-database", "pgsql://x/y")
    assert unusable.returncode == 2
    assert procs.one_line(unusable.stderr).startswith("caravel-lite relay: --app-database: ")
    usage = run("--help")
    assert usage.returncode == 0 and usage.stdout.startswith("usage: caravel-lite ")
