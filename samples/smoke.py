#!/usr/bin/env python3
"""End-to-end smoke test of the sample worker, as a user would install it.

Builds a wheel from this checkout, installs it into a fresh virtual environment outside
the checkout, and drives ``python -m caravel_lite.sample`` through the crash-and-recover
story, continuous mode, a hard kill, a SIGTERM in the middle of a job, the read-only
status command, an unmigrated directory, the ``caravel-lite`` console script and the
dashboard (installed with the ``web`` extra). Every command is a separate process of
the new environment (its python or its script), started from a directory outside the
checkout, so the installed wheel (not the source tree) is what runs.

    python samples/smoke.py                                    # SQLite only
    python samples/smoke.py --databases sqlite,postgres,mysql  # also the servers

The server runs create their own databases (named caravel_smoke_<random>) on
CARAVEL_SMOKE_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/postgres) and
CARAVEL_SMOKE_MYSQL_URL (default mysql://root@127.0.0.1:3306/mysql) and drop exactly
those afterwards. CARAVEL_SMOKE_DATABASES may replace --databases.

Standard library only. Exits non-zero at the first failed check, saying what failed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKENDS = ("sqlite", "postgres", "mysql")
EXTRAS = {"postgres": "postgres", "mysql": "mysql"}
ADMIN_URLS = {
    "postgres": os.environ.get("CARAVEL_SMOKE_POSTGRES_URL",
                               "postgresql://postgres@127.0.0.1:5432/postgres"),
    "mysql": os.environ.get("CARAVEL_SMOKE_MYSQL_URL", "mysql://root@127.0.0.1:3306/mysql"),
}
DB_PREFIX = "caravel_smoke_"
CRASH_EXIT_CODE = 73
CRASH_LEASE_SECONDS = 2     # the crashing worker's lease: short, so recovery is quick
SIGTERM_LEASE_SECONDS = 4   # long enough to see the interrupted job still leased
COMMAND_TIMEOUT = 120
WAIT_TIMEOUT = 60
ZERO = {"ready": 0, "delayed": 0, "active_leases": 0, "expired_leases": 0,
        "dead_letter": 0, "completed": 0}
# Files and folders of the checkout that are not source (never copied into the build).
IGNORED = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                 ".pytest_cache", ".tox", "*.pyc", ".venv", "venv")

# Creates or drops one database on a server, with the installed library's own opener.
ADMIN_SCRIPT = """
import sys
from caravel_lite.dialect import open_database
db = open_database(sys.argv[1])
db.connect()
db.execute_sql(sys.argv[2])
db.close()
"""

# Seeds a queue database with exactly one job of the sample's tenant in each counted
# category, relative to the real clock, using the installed library, and one job of
# another tenant in each category of the same queue, which --queue-status must not
# count. Keys and payloads carry a marker that --queue-status must never print.
SEED_SCRIPT = """
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from caravel_lite import (DatabaseQueue, Dispatch, Failure, JobRegistry, QueueOptions,
                          migrate, open_database)

url, marker = sys.argv[1], sys.argv[2]
QUEUE, TENANT = "synthetic-quantities", "synthetic"

@dataclass(frozen=True)
class SeedNote:
    note: str

registry = JobRegistry()
registry.register("smoke.seed.v1", SeedNote, lambda job, ctx: None)
db = open_database(url)
db.connect()
migrate(db)
past = lambda: datetime.now(timezone.utc) - timedelta(hours=2)
live = DatabaseQueue(db, registry, QueueOptions(lease_duration=timedelta(hours=1)))
once = DatabaseQueue(db, registry, QueueOptions(max_attempts=1))
then = DatabaseQueue(db, registry, QueueOptions(lease_duration=timedelta(minutes=5)),
                     clock=past)

def put(queue, name, tenant, **dispatch):
    return queue.enqueue(SeedNote(f"{marker}-payload-{name}"),
                         Dispatch(QUEUE, tenant, f"{marker}-key-{name}", **dispatch))

def take(queue, name, tenant):
    job = put(queue, name, tenant)
    lease = queue.claim(QUEUE)
    assert lease is not None and lease.job_id == job.job_id, name
    return lease

# Each claim must take the job just put: nothing is ready meanwhile, and the expired
# leases are taken last, because a claim at the real time would first sweep them back.
TENANTS = (TENANT, "smoke-other-tenant")
for tenant in TENANTS:
    assert live.complete(take(live, "completed", tenant))
    assert once.fail(take(once, "dead-letter", tenant), Failure.HANDLER_FAILED)
    take(live, "active-lease", tenant)   # expires in an hour
for tenant in TENANTS:
    take(then, "expired-lease", tenant)  # claimed two hours ago with a five-minute lease
for tenant in TENANTS:
    put(live, "ready", tenant)
    put(live, "delayed", tenant, not_before=datetime.now(timezone.utc) + timedelta(hours=1))
db.close()
"""


class SmokeFailure(Exception):
    """A check failed; the message says which and why."""


def check(condition: object, message: str) -> None:
    if not condition:
        raise SmokeFailure(message)


def say(text: str) -> None:
    print(text, flush=True)


class Target:
    """Where one run keeps its data: a directory of SQLite files or a server database."""

    def __init__(self, backend: str, env: Dict[str, str], directory: Optional[str] = None):
        self.backend = backend
        self.env = env
        self.directory = directory


class Smoke:
    def __init__(self, work: str, python: str) -> None:
        self.work = work
        self.python = python
        self.created: Dict[str, List[str]] = {"postgres": [], "mysql": []}
        self.running: List[subprocess.Popen[bytes]] = []
        self._base_env = {name: value for name, value in os.environ.items()
                          if not name.startswith(("CARAVEL_WORKER_", "CARAVEL_SMOKE_"))
                          and name not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}

    # -- processes -----------------------------------------------------------------------

    def env(self, target: Target, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
        env = dict(self._base_env)
        env.update(target.env)
        env.update(extra or {})
        return env

    def sample(self, target: Target, flag: str, extra: Optional[Dict[str, str]] = None,
               expect: Optional[int] = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([self.python, "-m", "caravel_lite.sample", flag],
                              cwd=self.work, env=self.env(target, extra), capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT)
        if expect is not None and done.returncode != expect:
            raise SmokeFailure(f"{flag} exited {done.returncode}, expected {expect}; "
                               f"stderr: {done.stderr.strip()[-800:]}")
        return done

    def json(self, target: Target, flag: str, extra: Optional[Dict[str, str]] = None) -> Any:
        done = self.sample(target, flag, extra)
        lines = done.stdout.strip().splitlines()
        check(len(lines) == 1, f"{flag} printed {len(lines)} lines, expected one JSON line: "
                               f"{done.stdout!r}")
        try:
            return json.loads(lines[0])
        except ValueError:
            raise SmokeFailure(f"{flag} printed invalid JSON: {lines[0]!r}") from None

    def start_worker(self, target: Target, name: str,
                     extra: Optional[Dict[str, str]] = None) -> subprocess.Popen[bytes]:
        log = open(os.path.join(self.work, f"{name}.log"), "w")
        process = subprocess.Popen([self.python, "-m", "caravel_lite.sample", "--work"],
                                   cwd=self.work, env=self.env(target, extra),
                                   stdout=log, stderr=subprocess.STDOUT)
        log.close()
        process.log_path = log.name  # type: ignore[attr-defined]
        self.running.append(process)
        return process

    def stop_worker(self, process: subprocess.Popen[bytes], signum: int) -> int:
        process.send_signal(signum)
        try:
            code = process.wait(timeout=WAIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise SmokeFailure(f"the worker did not exit within {WAIT_TIMEOUT}s of "
                               f"{signal.Signals(signum).name}") from None
        self.running.remove(process)
        return code

    def worker_log(self, process: subprocess.Popen[bytes]) -> str:
        with open(process.log_path) as stream:  # type: ignore[attr-defined]
            return stream.read()[-1500:]

    def wait_for(self, what: str, condition: Callable[[], object],
                 process: Optional[subprocess.Popen[bytes]] = None,
                 timeout: float = WAIT_TIMEOUT) -> object:
        """Poll ``condition`` until it holds; fail early if ``process`` dies."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if process is not None and process.poll() is not None:
                raise SmokeFailure(f"the worker exited with {process.returncode} while "
                                   f"waiting for {what}: {self.worker_log(process)}")
            if time.monotonic() >= deadline:
                raise SmokeFailure(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.2)

    def run_python(self, script: str, *args: str) -> None:
        done = subprocess.run([self.python, "-c", script, *args], cwd=self.work,
                              env=dict(self._base_env), capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT)
        if done.returncode != 0:
            raise SmokeFailure(f"helper script failed: {done.stderr.strip()[-800:]}")

    # -- targets -------------------------------------------------------------------------

    def new_target(self, backend: str) -> Target:
        if backend == "sqlite":
            directory = tempfile.mkdtemp(prefix="data-", dir=self.work)
            return Target(backend, {"CARAVEL_WORKER_DIRECTORY": directory}, directory)
        name = DB_PREFIX + secrets.token_hex(6)
        create = f"CREATE DATABASE {name}"
        if backend == "mysql":
            create += " CHARACTER SET utf8mb4"
        self.run_python(ADMIN_SCRIPT, ADMIN_URLS[backend], create)
        self.created[backend].append(name)
        parts = urlsplit(ADMIN_URLS[backend])
        url = urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))
        return Target(backend, {"CARAVEL_WORKER_DATABASE_URL": url})

    def target_url(self, target: Target) -> str:
        if target.directory is not None:
            return "sqlite:///" + os.path.join(target.directory, "queue.db")
        return target.env["CARAVEL_WORKER_DATABASE_URL"]

    def cleanup(self) -> None:
        for process in list(self.running):
            if process.poll() is None:
                process.kill()
                process.wait()
        for backend, names in self.created.items():
            for name in names:
                assert name.startswith(DB_PREFIX)
                drop = f"DROP DATABASE IF EXISTS {name}"
                if backend == "postgres":
                    drop += " WITH (FORCE)"
                try:
                    self.run_python(ADMIN_SCRIPT, ADMIN_URLS[backend], drop)
                except SmokeFailure as exc:
                    say(f"warning: could not drop {backend} database {name}: {exc}")


def step(label: str, action: Callable[[], str]) -> None:
    """Run one step and print one line with its result."""
    say(f"{label} ... {action()}")


def counts(status: Dict[str, Any]) -> Dict[str, Any]:
    return {key: status[key] for key in ZERO}


# -- the stories -------------------------------------------------------------------------


def recovery(smoke: Smoke, backend: str) -> None:
    """Migrate, enqueue twice, crash after saving a result, recover after the lease."""
    t = smoke.new_target(backend)
    tag = f"[{backend}]"
    ids: List[str] = []

    def migrate() -> str:
        applied = smoke.json(t, "--migrate")["applied"]
        check({"0001_create_jobs", "0001_create_results"} <= set(applied),
              f"--migrate applied {applied}")
        return "applied " + ", ".join(applied)

    def check_model() -> str:
        result = smoke.json(t, "--check-model")
        check(result == {"pending_migrations": False}, f"--check-model said {result}")
        return json.dumps(result)

    def status_is(expected: Dict[str, int]) -> Callable[[], str]:
        def run() -> str:
            found = counts(smoke.json(t, "--queue-status"))
            check(found == expected, f"queue status {found}, expected {expected}")
            return json.dumps(found)
        return run

    def enqueue(first: bool) -> Callable[[], str]:
        def run() -> str:
            results = smoke.json(t, "--enqueue-demo")
            check(len(results) == 3, f"--enqueue-demo returned {results}")
            flags = [r["already_enqueued"] for r in results]
            if first:
                check(flags == [False] * 3, f"expected 3 new jobs, got {results}")
                ids.extend(r["job_id"] for r in results)
                return "3 new jobs"
            check(flags == [True] * 3, f"expected all already enqueued, got {results}")
            check([r["job_id"] for r in results] == ids, "a repeat returned other job ids")
            return "same 3 ids, all already enqueued"
        return run

    def crash() -> str:
        done = smoke.sample(t, "--work-once", {"CARAVEL_WORKER_CRASH_AFTER_RESULT": "1",
                                               "CARAVEL_WORKER_LEASE_SECONDS":
                                                   str(CRASH_LEASE_SECONDS)},
                            expect=CRASH_EXIT_CODE)
        return f"exit code {done.returncode}"

    def report_is(events: int, total: Optional[int] = None) -> Callable[[], str]:
        def run() -> str:
            report = smoke.json(t, "--report")
            check(report["events"] == events and (total is None or report["total"] == total),
                  f"report {report}, expected {events} events"
                  + (f" with total {total}" if total is not None else ""))
            return json.dumps(report)
        return run

    def wait_lease() -> str:
        started = time.monotonic()
        smoke.wait_for("the crashed job's lease to expire",
                       lambda: smoke.json(t, "--queue-status")["expired_leases"] == 1)
        return f"lease expired after {time.monotonic() - started:.1f}s"

    def work_once(expected: List[bool]) -> Callable[[], str]:
        def run() -> str:
            claimed = [smoke.json(t, "--work-once")["claimed"] for _ in expected]
            check(claimed == expected, f"--work-once claimed {claimed}, expected {expected}")
            return "claimed " + ", ".join(str(c).lower() for c in claimed)
        return run

    step(f"{tag} migrate", migrate)
    step(f"{tag} check model", check_model)
    step(f"{tag} status all zero", status_is(ZERO))
    step(f"{tag} enqueue demo", enqueue(first=True))
    step(f"{tag} status ready 3", status_is(dict(ZERO, ready=3)))
    step(f"{tag} enqueue demo again", enqueue(first=False))
    step(f"{tag} crash after saving a result", crash)
    step(f"{tag} report after crash", report_is(1))
    step(f"{tag} wait past the lease", wait_lease)
    step(f"{tag} work once x4", work_once([True, True, True, False]))
    step(f"{tag} report", report_is(3, 6))
    step(f"{tag} enqueue demo after completion", enqueue(first=False))
    step(f"{tag} work once claims nothing", work_once([False]))
    step(f"{tag} status completed 3", status_is(dict(ZERO, completed=3)))


def drain_then_kill(smoke: Smoke, backend: str) -> None:
    """A continuous worker drains jobs enqueued while it runs; SIGKILL loses nothing."""
    t = smoke.new_target(backend)
    tag = f"[{backend}]"

    def run() -> str:
        smoke.json(t, "--migrate")
        worker = smoke.start_worker(t, f"drain-{backend}")
        smoke.json(t, "--enqueue-demo")
        smoke.wait_for("the running worker to complete 3 jobs",
                       lambda: smoke.json(t, "--queue-status")["completed"] == 3, worker)
        code = smoke.stop_worker(worker, signal.SIGKILL)
        check(code == -signal.SIGKILL, f"the killed worker exited with {code}")
        report = smoke.json(t, "--report")
        check(report == {"events": 3, "total": 6}, f"report after SIGKILL: {report}")
        found = counts(smoke.json(t, "--queue-status"))
        check(found == dict(ZERO, completed=3), f"status after SIGKILL: {found}")
        return f"drained while running, then SIGKILL; report {json.dumps(report)}"

    step(f"{tag} continuous --work, then kill -9", run)


def sigterm_mid_job(smoke: Smoke, backend: str) -> None:
    """SIGTERM while a handler runs: exit 0, the job stays leased, a new worker ends it."""
    t = smoke.new_target(backend)
    tag = f"[{backend}]"
    ready = os.path.join(smoke.work, f"sigterm-ready-{backend}")
    cancelled = os.path.join(smoke.work, f"sigterm-cancelled-{backend}")

    def interrupt() -> str:
        smoke.json(t, "--migrate")
        smoke.json(t, "--enqueue-demo")
        worker = smoke.start_worker(t, f"sigterm-{backend}", {
            "CARAVEL_SMOKE_SIGTERM_READY": ready, "CARAVEL_SMOKE_SIGTERM_CANCELLED": cancelled,
            "CARAVEL_WORKER_LEASE_SECONDS": str(SIGTERM_LEASE_SECONDS)})
        smoke.wait_for("the handler to save its result", lambda: os.path.exists(ready), worker)
        code = smoke.stop_worker(worker, signal.SIGTERM)
        check(code == 0, f"SIGTERM mid-job: exit {code}: {smoke.worker_log(worker)}")
        with open(ready) as first, open(cancelled) as second:
            job_id, cancelled_id = first.read(), second.read()
        check(job_id and job_id == cancelled_id,
              f"ready file names {job_id!r}, cancelled file {cancelled_id!r}")
        found = counts(smoke.json(t, "--queue-status"))
        leased = found["active_leases"] + found["expired_leases"]
        check(leased == 1 and found["ready"] == 2 and found["completed"] == 0,
              f"after SIGTERM expected 1 leased and 2 ready, got {found}")
        report = smoke.json(t, "--report")
        check(report["events"] == 1, f"report after SIGTERM: {report}")
        return f"exit 0, job {job_id} left leased; 1 leased, 2 ready"

    def restart() -> str:
        worker = smoke.start_worker(t, f"restart-{backend}")
        started = time.monotonic()
        smoke.wait_for("the restarted worker to complete all 3 jobs",
                       lambda: smoke.json(t, "--queue-status")["completed"] == 3, worker)
        elapsed = time.monotonic() - started
        code = smoke.stop_worker(worker, signal.SIGTERM)
        check(code == 0, f"the restarted worker exited {code} on SIGTERM")
        report = smoke.json(t, "--report")
        check(report == {"events": 3, "total": 6}, f"report after restart: {report}")
        return f"all 3 completed after {elapsed:.1f}s; report {json.dumps(report)}"

    step(f"{tag} SIGTERM mid-job", interrupt)
    step(f"{tag} restarted worker after the lease", restart)


def unmigrated(smoke: Smoke, backend: str) -> None:
    """An unmigrated target: --queue-status fails and creates nothing, --work exits 1."""
    t = smoke.new_target(backend)
    tag = f"[{backend}]"

    def run() -> str:
        status = smoke.sample(t, "--queue-status", expect=None)
        check(status.returncode != 0, "--queue-status succeeded on an unmigrated target")
        if t.directory is not None:
            check(os.listdir(t.directory) == [],
                  f"--queue-status created {os.listdir(t.directory)}")
        work = smoke.sample(t, "--work", expect=1)
        created = ""
        if t.directory is not None:
            created = f", files created: {os.listdir(t.directory) or 'none'}"
        return (f"--queue-status exit {status.returncode}, --work exit {work.returncode}"
                + created)

    step(f"{tag} unmigrated target", run)


def seeded_status(smoke: Smoke, backend: str) -> None:
    """--queue-status counts one job of the sample's tenant per category (another
    tenant's job in each category of the same queue is not counted), leaks nothing and
    writes nothing."""
    t = smoke.new_target(backend)
    tag = f"[{backend}]"
    marker = "smoke-secret-" + secrets.token_hex(4)

    def fingerprint() -> Dict[str, str]:
        assert t.directory is not None  # only for SQLite files
        path = os.path.join(t.directory, "queue.db")
        with open(path, "rb") as stream:
            return {"sha256": hashlib.sha256(stream.read()).hexdigest()}

    def run() -> str:
        smoke.run_python(SEED_SCRIPT, smoke.target_url(t), marker)
        before = fingerprint() if t.directory is not None else None
        listing = sorted(os.listdir(t.directory)) if t.directory is not None else None
        done = smoke.sample(t, "--queue-status")
        found = counts(json.loads(done.stdout))
        check(found == {key: 1 for key in ZERO},
              f"seeded status {found}, expected 1 each (the sample's tenant only)")
        output = done.stdout + done.stderr
        for secret in (marker, "payload", "key", "demo-"):
            check(secret not in output, f"--queue-status output leaks {secret!r}: {output!r}")
        if t.directory is None:
            return f"one in each category, other tenant not counted: {json.dumps(found)}"
        check(fingerprint() == before, "--queue-status changed queue.db")
        check(not os.path.exists(os.path.join(t.directory, "results.db")),
              "--queue-status created results.db")
        assert listing is not None  # read above, for the same directory
        extra = sorted(set(os.listdir(t.directory)) - set(listing))
        # A read-only SQLite reader of a WAL database may create the -wal/-shm side
        # files (SQLite's shared-memory index); it must write nothing into the log.
        check(set(extra) <= {"queue.db-wal", "queue.db-shm"}, f"new files: {extra}")
        wal = os.path.join(t.directory, "queue.db-wal")
        check(not os.path.exists(wal) or os.path.getsize(wal) == 0,
              "--queue-status wrote to the write-ahead log")
        return (f"one in each category ({json.dumps(found)}), other tenant not counted, "
                "no key or payload printed, "
                "queue.db byte-identical, no results.db")

    step(f"{tag} --queue-status on a seeded database", run)


def console_script(smoke: Smoke, backend: str) -> None:
    """The installed ``caravel-lite`` script, with the database from CARAVEL_DATABASE_URL:
    check fails with one line, migrate applies, check passes."""
    t = smoke.new_target(backend)
    tag = f"[{backend}]"
    script = os.path.join(os.path.dirname(smoke.python), "caravel-lite")
    env = smoke.env(t, {"CARAVEL_DATABASE_URL": smoke.target_url(t)})

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *args], cwd=smoke.work, env=env, capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT)

    def run() -> str:
        check(os.path.exists(script), f"the wheel installed no {script}")
        before = cli("check")
        lines = before.stderr.strip().splitlines()
        check(before.returncode == 1 and len(lines) == 1
              and lines[0].startswith("caravel-lite check: "),
              f"check before migrate: exit {before.returncode}, stderr {before.stderr!r}")
        done = cli("migrate")
        check(done.returncode == 0 and json.loads(done.stdout)["applied"],
              f"migrate: exit {done.returncode}, stderr {done.stderr.strip()[-800:]}")
        after = cli("check")
        check(after.returncode == 0, f"check after migrate: exit {after.returncode}")
        return "check exit 1 (one line), migrate applied, check exit 0"

    step(f"{tag} caravel-lite console script", run)


def dashboard(smoke: Smoke, backend: str) -> None:
    """``caravel-lite dashboard`` from the wheel with the ``web`` extra: it serves the
    overview, the jobs page and its own stylesheet (templates and assets came with the
    wheel), refuses an action without authentication, and stops on SIGTERM."""
    t = smoke.new_target(backend)
    tag = f"[{backend}]"
    script = os.path.join(os.path.dirname(smoke.python), "caravel-lite")
    env = smoke.env(t, {"CARAVEL_DATABASE_URL": smoke.target_url(t)})

    def run() -> str:
        done = subprocess.run([script, "migrate"], cwd=smoke.work, env=env,
                              capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
        check(done.returncode == 0, f"migrate: {done.stderr.strip()[-800:]}")
        log_path = os.path.join(smoke.work, f"dashboard-{backend}.log")
        with open(log_path, "w") as log:
            process = subprocess.Popen([script, "dashboard", "--bind", "127.0.0.1:0"],
                                       cwd=smoke.work, env=env, stdout=log,
                                       stderr=subprocess.STDOUT)
        smoke.running.append(process)

        def serving() -> Optional[str]:
            with open(log_path) as stream:
                for line in stream:
                    if "serving http://" in line:
                        return line.split("serving ")[1].split()[0]
            if process.poll() is not None:
                raise SmokeFailure(f"the dashboard exited {process.returncode}: "
                                   f"{open(log_path).read()[-800:]}")
            return None
        base = str(smoke.wait_for("the dashboard to listen", serving))

        def status(path: str, data: Optional[bytes] = None) -> Tuple[int, bytes]:
            request = urllib.request.Request(base.rstrip("/") + path, data=data)
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return response.status, response.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()
        code, body = status("/")
        check(code == 200 and b"<h1>Overview" in body, f"GET / answered {code}")
        for path in ("/jobs", "/dead-letters", "/static/dashboard.css",
                     "/static/dashboard.js"):
            code, _ = status(path)
            check(code == 200, f"GET {path} answered {code}")
        code, _ = status("/actions/replay", b"job_id=00000000-0000-0000-0000-000000000000")
        check(code == 403, f"an action without authentication answered {code}, not 403")
        exit_code = smoke.stop_worker(process, signal.SIGTERM)
        check(exit_code == 0, f"the dashboard exited {exit_code} on SIGTERM")
        return "overview, jobs, assets 200; action without auth 403; SIGTERM exit 0"

    step(f"{tag} caravel-lite dashboard (extra web)", run)


# -- building and installing --------------------------------------------------------------


def build_and_install(work: str, backends: List[str]) -> str:
    source = os.path.join(work, "source")
    dist = os.path.join(work, "dist")
    venv = os.path.join(work, "venv")

    def build() -> str:
        # Build from a copy, so that the checkout gains no build/ folder.
        shutil.copytree(REPO, source, ignore=IGNORED)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                               "-w", dist, source], capture_output=True, text=True,
                              timeout=600)
        check(done.returncode == 0, f"building the wheel failed: {done.stderr[-1500:]}")
        wheels = [name for name in os.listdir(dist) if name.endswith(".whl")]
        check(len(wheels) == 1, f"expected one wheel, found {wheels}")
        return wheels[0]

    wheel = build()
    say(f"build wheel ... {wheel}")

    python = os.path.join(venv, "bin", "python")

    def install() -> str:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
        # "web": the dashboard, whose templates and assets must ship in the wheel.
        extras = sorted({EXTRAS[b] for b in backends if b in EXTRAS} | {"web"})
        requirement = os.path.join(dist, wheel) + (f"[{','.join(extras)}]" if extras else "")
        done = subprocess.run([python, "-m", "pip", "install", "--quiet",
                               "--disable-pip-version-check", requirement],
                              capture_output=True, text=True, timeout=900)
        check(done.returncode == 0, f"installing the wheel failed: {done.stderr[-1500:]}")
        where = subprocess.run([python, "-c", "import caravel_lite; print(caravel_lite.__file__)"],
                               cwd=work, capture_output=True, text=True, timeout=60)
        location = where.stdout.strip()
        check(location.startswith(venv) and not location.startswith(REPO),
              f"caravel_lite imports from {location!r}, not from the new environment")
        return f"installed{' with ' + ', '.join(extras) if extras else ''}; imports from the venv"

    step("fresh virtual environment", install)
    shutil.rmtree(source, ignore_errors=True)
    return python


def parse_backends(raw: str) -> List[str]:
    chosen = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in BACKENDS]
    if not chosen or unknown:
        raise SystemExit(f"smoke.py: --databases takes a comma-separated subset of "
                         f"{','.join(BACKENDS)}; got {raw!r}")
    return chosen


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--databases", default=os.environ.get("CARAVEL_SMOKE_DATABASES",
                                                              "sqlite"),
                        help="comma-separated: sqlite, postgres, mysql (default sqlite)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (wheel, venv, data, logs)")
    args = parser.parse_args(argv)
    backends = parse_backends(args.databases)
    work = tempfile.mkdtemp(prefix="caravel-smoke-")
    check(not os.path.realpath(work).startswith(os.path.realpath(REPO) + os.sep),
          "the temporary directory must be outside the checkout")
    say(f"smoke test of the sample worker on {', '.join(backends)} in {work}")
    smoke: Optional[Smoke] = None
    started = time.monotonic()
    try:
        smoke = Smoke(work, build_and_install(work, backends))
        for backend in backends:
            recovery(smoke, backend)
            drain_then_kill(smoke, backend)
            sigterm_mid_job(smoke, backend)
            seeded_status(smoke, backend)
            unmigrated(smoke, backend)
            console_script(smoke, backend)
            dashboard(smoke, backend)
    except SmokeFailure as exc:
        say(f"FAILED: {exc}")
        return 1
    except subprocess.TimeoutExpired as exc:
        say(f"FAILED: a command took longer than {exc.timeout}s: {exc.cmd}")
        return 1
    finally:
        if smoke is not None:
            smoke.cleanup()
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    say(f"smoke test passed on {', '.join(backends)} in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
