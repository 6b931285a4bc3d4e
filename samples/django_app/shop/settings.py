"""Settings of the sample shop. The database is SQLite in this directory unless
``SAMPLE_DATABASE_URL`` names a PostgreSQL one (``postgresql://user@host:5432/name``);
``SAMPLE_DATABASE_NAME`` overrides the database name (the sample's tests start a worker
on the test database with it)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict
from urllib.parse import urlsplit

from caravel_lite.contrib.django.compat import FRAMEWORK

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("SAMPLE_SECRET_KEY", "sample-only-" + "not-secret-" * 4)
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "shop.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages",
    "caravel_lite.contrib.django",  # caravel_lite's schema (a migration) and commands
    "orders",
] + (["django_tasks"] if FRAMEWORK == "django_tasks" else [])

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates",
              "APP_DIRS": True,
              "OPTIONS": {"context_processors": [
                  "django.template.context_processors.request",
                  "django.contrib.auth.context_processors.auth",
                  "django.contrib.messages.context_processors.messages"]}}]


def _database() -> Dict[str, Any]:
    url = os.environ.get("SAMPLE_DATABASE_URL")
    if not url:
        name = os.environ.get("SAMPLE_DATABASE_NAME", str(BASE_DIR / "db.sqlite3"))
        # The test database is a file too: caravel_lite's worker connections must see
        # it (Django's default SQLite test database is in memory).
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": name,
                "TEST": {"NAME": str(BASE_DIR / "test.sqlite3")}}
    parts = urlsplit(url)
    return {"ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("SAMPLE_DATABASE_NAME", parts.path.lstrip("/")),
            "USER": parts.username or "", "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "", "PORT": str(parts.port or "")}


DATABASES = {"default": _database()}

# The queue lives in the project's own database: enqueue() joins transaction.atomic().
TASKS = {
    "default": {
        "BACKEND": "caravel_lite.contrib.django.CaravelBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"DATABASE": "default", "MAX_ATTEMPTS": 3},
    },
}
