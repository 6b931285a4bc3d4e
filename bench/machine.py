"""What the numbers were measured on: hardware, software versions, server versions."""
from __future__ import annotations

import contextlib
import os
import platform
import sqlite3
import subprocess
from importlib import metadata
from typing import Dict, List

from bench import targets

PACKAGES = ("caravel_lite", "peewee", "psycopg", "PyMySQL", "huey", "pgqueuer",
            "procrastinate", "celery", "kombu", "SQLAlchemy")


def _memory_gib() -> str:
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "unknown"


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _load() -> str:
    with contextlib.suppress(OSError, AttributeError):
        return ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return "unknown"


def _server_version(target: targets.Target) -> str:
    if targets.server_reachable(target) is not None:
        return "unreachable"
    try:
        if target.kind == "postgres":
            import psycopg
            with psycopg.connect(host=target.host, port=target.port, user=target.user,
                                 dbname="postgres") as conn:
                return conn.execute("SHOW server_version").fetchone()[0]
        import pymysql
        conn = pymysql.connect(host=target.host, port=target.port, user=target.user)
        try:
            with conn.cursor() as cursor:
                cursor.execute("SELECT VERSION()")
                return cursor.fetchone()[0]
        finally:
            conn.close()
    except Exception as exc:  # reported, not fatal
        return f"unknown ({type(exc).__name__})"


def _commit() -> str:
    """The caravel_lite tree measured: its git commit, when it is a checkout."""
    here = os.path.dirname(os.path.abspath(__file__))
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["git", "-C", here, "log", "-1", "--format=%h %cI"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--",
                                    "caravel_lite", "migrations"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return out.stdout.strip() + (" (with uncommitted changes)" if dirty else "")
    return "unknown"


def describe(load_before: str) -> List[str]:
    """Markdown bullet lines."""
    versions: Dict[str, str] = {}
    for package in PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = ("from this checkout" if package == "caravel_lite"
                                 else "not installed")
    return [
        f"- caravel_lite at commit {_commit()}",
        f"- CPU: {os.cpu_count()} logical cores, {_cpu_model()}; memory {_memory_gib()}",
        f"- OS: {platform.system()} {platform.release()}",
        f"- Load average (1, 5, 15 min) before the run: {load_before}; after: {_load()}",
        f"- Python {platform.python_version()}; SQLite library {sqlite3.sqlite_version}",
        "- Packages: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"- PostgreSQL {_server_version(targets.TARGETS['postgres'])}; "
        f"MariaDB {_server_version(targets.TARGETS['mysql'])}",
    ]


def load_now() -> str:
    return _load()
