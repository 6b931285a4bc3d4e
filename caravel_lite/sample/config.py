"""The sample's settings, read once from the environment and validated in full.

A bad setting is a usage error (exit 2) reported before any database is opened.
"""
from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

DIRECTORY = "CARAVEL_WORKER_DIRECTORY"
DATABASE_URL = "CARAVEL_WORKER_DATABASE_URL"
RESULTS_URL = "CARAVEL_WORKER_RESULTS_URL"
LEASE_SECONDS = "CARAVEL_WORKER_LEASE_SECONDS"
CRASH_AFTER_RESULT = "CARAVEL_WORKER_CRASH_AFTER_RESULT"
SIGTERM_READY = "CARAVEL_SMOKE_SIGTERM_READY"
SIGTERM_CANCELLED = "CARAVEL_SMOKE_SIGTERM_CANCELLED"

QUEUE_FILE = "queue.db"
RESULTS_FILE = "results.db"
DEFAULT_LEASE_SECONDS = 60
MAX_LEASE_SECONDS = 3600
_SERVER_SCHEMES = ("postgres", "postgresql", "mysql")


class ConfigError(ValueError):
    """A missing or invalid setting; the command line exits with code 2."""


@dataclass(frozen=True)
class SampleConfig:
    """Where the sample keeps its data and how its worker behaves.

    Either ``directory`` is set (SQLite files ``queue.db`` and ``results.db`` in it) or
    ``queue_url``/``results_url`` name server databases (which may be one database).
    """

    directory: Optional[str] = None
    queue_url: Optional[str] = None
    results_url: Optional[str] = None
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    crash_after_result: bool = False
    sigterm_ready: Optional[str] = None
    sigterm_cancelled: Optional[str] = None

    @property
    def uses_files(self) -> bool:
        return self.directory is not None

    @property
    def queue_path(self) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, QUEUE_FILE)

    @property
    def results_path(self) -> str:
        assert self.directory is not None
        return os.path.join(self.directory, RESULTS_FILE)

    def describe(self) -> str:
        """Where the data lives, without credentials (for log lines)."""
        if self.directory is not None:
            return self.directory
        return _without_password(self.queue_url or "")


def _text(env: Mapping[str, str], name: str) -> Optional[str]:
    value = env.get(name, "")
    return value if value.strip() else None


def _lease_seconds(env: Mapping[str, str]) -> int:
    raw = _text(env, LEASE_SECONDS)
    if raw is None:
        return DEFAULT_LEASE_SECONDS
    if not re.fullmatch(r"[0-9]{1,7}", raw.strip()):
        raise ConfigError(f"{LEASE_SECONDS} must be a whole number of seconds "
                          f"(1..{MAX_LEASE_SECONDS}), got {raw!r}")
    seconds = int(raw.strip())
    if not 1 <= seconds <= MAX_LEASE_SECONDS:
        raise ConfigError(f"{LEASE_SECONDS} must be between 1 and {MAX_LEASE_SECONDS}, "
                          f"got {seconds}")
    return seconds


def _flag(env: Mapping[str, str], name: str) -> bool:
    raw = (env.get(name) or "").strip()
    if raw in ("", "0"):
        return False
    if raw == "1":
        return True
    raise ConfigError(f"{name} must be 1 (on) or 0/unset (off), got {raw!r}")


def _server_url(name: str, url: str) -> str:
    scheme = url.split(":", 1)[0].split("+", 1)[0].lower()
    if scheme not in _SERVER_SCHEMES or "://" not in url:
        raise ConfigError(f"{name} must be a postgresql://... or mysql://... URL "
                          f"(leave it unset to use SQLite files in {DIRECTORY})")
    return url


def _directory(env: Mapping[str, str]) -> str:
    raw = env.get(DIRECTORY, "")
    if not raw:
        raise ConfigError(f"{DIRECTORY} is not set: point it at an existing directory "
                          f"(absolute path) that will hold {QUEUE_FILE} and {RESULTS_FILE}")
    if not os.path.isabs(raw):
        raise ConfigError(f"{DIRECTORY} must be an absolute path, got {raw!r}")
    if not os.path.isdir(raw):
        raise ConfigError(f"{DIRECTORY} names no existing directory: {raw!r}")
    return raw


def _hook_path(env: Mapping[str, str], name: str) -> Optional[str]:
    raw = _text(env, name)
    if raw is not None and not os.path.isdir(os.path.dirname(os.path.abspath(raw))):
        raise ConfigError(f"{name} must be a file path in an existing directory, got {raw!r}")
    return raw


def from_environment(env: Optional[Mapping[str, str]] = None) -> SampleConfig:
    """Read and validate every setting; raises :class:`ConfigError` naming the bad one."""
    env = os.environ if env is None else env
    queue_url = _text(env, DATABASE_URL)
    results_url = _text(env, RESULTS_URL)
    # The worker's settings first, then where the data lives.
    worker = SampleConfig(lease_seconds=_lease_seconds(env),
                          crash_after_result=_flag(env, CRASH_AFTER_RESULT),
                          sigterm_ready=_hook_path(env, SIGTERM_READY),
                          sigterm_cancelled=_hook_path(env, SIGTERM_CANCELLED))
    if queue_url is None:
        if results_url is not None:
            raise ConfigError(f"{RESULTS_URL} needs {DATABASE_URL} as well")
        return dataclasses.replace(worker, directory=_directory(env))
    queue_url = _server_url(DATABASE_URL, queue_url.strip())
    # Without a separate results URL, the results share the queue's database (their
    # migration history table is distinct, so the two schemas do not collide).
    results_url = _server_url(RESULTS_URL, results_url.strip()) if results_url else queue_url
    return dataclasses.replace(worker, queue_url=queue_url, results_url=results_url)


def _without_password(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@/]*@", r"//\1:***@", url)
