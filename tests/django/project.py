"""The test project: Django configured once per test process, on the selected
databases that Django can reach here, with one Caravel backend per database beside
Django's ImmediateBackend, and migrated by Django's own ``migrate`` (which runs the
app's migration, so caravel_lite's schema is applied the way a project gets it)."""
from __future__ import annotations

import importlib.util
import io
import os
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional
from urllib.parse import urlsplit

from tests.databases import SERVER_URLS, ServerDatabases, selected_backends, unreachable_reason

QUEUES = ["default", "other"]
UNLISTED_QUEUES = ["unlisted"]
CONTRACT_TASKS = "caravel_lite.contrib.django.contract.tasks"


def _server_entry(url: str) -> Dict[str, object]:
    parts = urlsplit(url)
    engine = "postgresql" if parts.scheme.startswith("postgres") else "mysql"
    return {"ENGINE": f"django.db.backends.{engine}", "NAME": parts.path.lstrip("/"),
            "USER": parts.username or "", "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "", "PORT": str(parts.port or ""),
            "TEST": {"NAME": parts.path.lstrip("/")}}


def django_reaches(backend: str) -> Optional[str]:
    """None when Django can use ``backend`` here, else why not. Django's MySQL backend
    is given PyMySQL (caravel_lite's own MariaDB driver) where mysqlclient, which
    needs a compiler and the client library's headers, is not installed."""
    if backend == "mysql" and importlib.util.find_spec("MySQLdb") is None:
        import pymysql
        pymysql.install_as_MySQLdb()
    return unreachable_reason(backend)


@dataclass
class Project:
    backends: List[str]  # the caravel_lite test backends configured (sqlite, postgres...)
    servers: Dict[str, ServerDatabases]

    @staticmethod
    def alias(backend: str) -> str:
        return f"caravel_{backend}"

    def drop(self) -> None:
        for server in self.servers.values():
            server.drop_all()


_project: List[Project] = []


def project() -> Project:
    """Configure Django (once per process) and migrate its databases."""
    if _project:
        return _project[0]
    import django
    from django.conf import settings
    from django.core.management import call_command

    chosen = [b for b in selected_backends() if django_reaches(b) is None]
    servers: Dict[str, ServerDatabases] = {}
    databases: Dict[str, Dict[str, object]] = {}
    directory = tempfile.mkdtemp(prefix="caravel-django-")
    for backend in chosen:
        if backend == "sqlite":
            path = os.path.join(directory, "db.sqlite3")
            entry: Dict[str, object] = {"ENGINE": "django.db.backends.sqlite3", "NAME": path,
                                        "TEST": {"NAME": path}}
        else:
            servers[backend] = ServerDatabases(backend)
            entry = _server_entry(servers[backend].create())
        databases["default" if not databases else backend] = entry
    if not databases:  # Django needs a default database even when only servers fail
        databases["default"] = {"ENGINE": "django.db.backends.sqlite3",
                                "NAME": os.path.join(directory, "unused.sqlite3")}
    names = list(databases)
    tasks: Dict[str, Dict[str, object]] = {
        "default": {"BACKEND": _immediate(), "QUEUES": QUEUES},
        "immediate": {"BACKEND": _immediate(), "QUEUES": QUEUES},
    }
    for backend, name in zip(chosen, names):
        tasks[Project.alias(backend)] = {
            "BACKEND": "caravel_lite.contrib.django.CaravelBackend", "QUEUES": QUEUES,
            "OPTIONS": {"DATABASE": name, "MAX_ATTEMPTS": 1,
                        "TASK_MODULES": [CONTRACT_TASKS, "tests.django.taskapp.tasks"]}}
    # A backend registering only the installed apps' tasks: on queue names of its own,
    # as the system check caravel_lite.E001 requires beside the backend above.
    tasks["probe_unlisted"] = {"BACKEND": "caravel_lite.contrib.django.CaravelBackend",
                               "QUEUES": UNLISTED_QUEUES, "OPTIONS": {"DATABASE": names[0]}}
    # A backend whose queue is in a database of its own (not Django's).
    tasks["caravel_separate"] = {
        "BACKEND": "caravel_lite.contrib.django.CaravelBackend", "QUEUES": QUEUES,
        "OPTIONS": {"DATABASE_URL": f"sqlite:///{os.path.join(directory, 'queue.sqlite3')}",
                    "MAX_ATTEMPTS": 1, "TASK_MODULES": [CONTRACT_TASKS]}}
    settings.configure(
        DEBUG=False, USE_TZ=True, ALLOWED_HOSTS=["testserver"], SECRET_KEY="caravel-lite-tests-" + "x" * 40,
        DATABASES=databases, TASKS=tasks, ROOT_URLCONF="tests.django.urls",
        INSTALLED_APPS=["django.contrib.admin", "django.contrib.auth",
                        "django.contrib.contenttypes", "django.contrib.sessions",
                        "django.contrib.messages", "caravel_lite.contrib.django",
                        "tests.django.taskapp"] + _backport_app(),
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                    "django.middleware.csrf.CsrfViewMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware",
                    "django.contrib.messages.middleware.MessageMiddleware"],
        TEMPLATES=[{"BACKEND": "django.template.backends.django.DjangoTemplates",
                    "APP_DIRS": True, "OPTIONS": {"context_processors": [
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                        "django.template.context_processors.request"]}}])
    django.setup()
    for name in names:
        call_command("migrate", database=name, verbosity=0, interactive=False)
    # The backend outside Django's databases: manage.py caravel_migrate.
    call_command("caravel_migrate", backend="caravel_separate", stdout=io.StringIO())
    _project.append(Project(chosen, servers))
    return _project[0]


def _immediate() -> str:
    from caravel_lite.contrib.django import compat
    return f"{compat.FRAMEWORK}.backends.immediate.ImmediateBackend"


def _backport_app() -> List[str]:
    from caravel_lite.contrib.django import compat
    return ["django_tasks"] if compat.FRAMEWORK == "django_tasks" else []
