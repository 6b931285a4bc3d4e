"""Database URLs a new user gets wrong, as the command line answers them (#23 items 5 and
6): SQLite URLs Peewee misreads exit 2 with the ``sqlite:///PATH`` form; read-only
commands never create a missing SQLite file and say so (exit 1, a database fault like
a server's missing database); a server whose driver is not
installed exits 2 naming the extra to install. Each run as a separate process, in a
directory of the test's own (a wrongly created file would land there)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli import procs


def _run(cwd: Path, *args: str, pythonpath: str = "") -> subprocess.CompletedProcess:
    env = procs.environment()
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + ":" + env["PYTHONPATH"]
    return subprocess.run(procs.command(*args), env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("command", ["check", "queues", "migrate"])
@pytest.mark.parametrize("url", ["sqlite:relative.db", "sqlite://relative.db"])
def test_a_sqlite_url_peewee_misreads_exits_2_with_the_three_slash_form(tmp_path, command,
                                                                       url):
    result = _run(tmp_path, command, "--database", url)
    assert result.returncode == 2, result.stderr
    line = procs.one_line(result.stderr)
    assert line.startswith(f"caravel-lite {command}: --database: "), line
    assert "sqlite:///PATH" in line and "Traceback" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # neither relative.db nor elative.db


@pytest.mark.parametrize("command", ["check", "queues"])
def test_a_read_only_command_never_creates_a_missing_sqlite_file(tmp_path, command):
    result = _run(tmp_path, command, "--database", "sqlite:///mistyped.db")
    assert result.returncode == 1, result.stderr  # a database fault, as a server's
    line = procs.one_line(result.stderr)
    assert "no such database file" in line and "mistyped.db" in line, line
    assert list(tmp_path.iterdir()) == []


def test_migrate_still_creates_the_file(tmp_path):
    result = _run(tmp_path, "migrate", "--database", "sqlite:///new.db")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "new.db").is_file()
    assert _run(tmp_path, "check", "--database", "sqlite:///new.db").returncode == 0


@pytest.fixture
def without_drivers(tmp_path) -> str:
    """A directory that, first on PYTHONPATH, makes the server drivers fail to import
    (as if the extras were not installed)."""
    shadow = tmp_path / "shadow"
    for name in ("psycopg", "psycopg2", "pymysql", "MySQLdb"):
        package = shadow / name
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    return str(shadow)


@pytest.mark.parametrize("url, extra", [
    ("postgresql://user@127.0.0.1/app", "postgres"),
    ("mysql://user@127.0.0.1/app", "mysql"),
])
@pytest.mark.parametrize("command", ["check", "migrate"])
def test_a_server_url_without_its_driver_names_the_extra(tmp_path, without_drivers, url,
                                                         extra, command):
    work = tmp_path / "work"
    work.mkdir()
    result = _run(work, command, "--database", url, pythonpath=without_drivers)
    assert result.returncode == 2, result.stderr
    line = procs.one_line(result.stderr)
    assert f"pip install 'caravel_lite[{extra}]'" in line, line
    assert "Traceback" not in result.stderr
