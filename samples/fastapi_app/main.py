"""The app for an ASGI server (``uvicorn fastapi_app.main:app``), on APP_DATABASE_URL
and CARAVEL_DATABASE_URL."""
from __future__ import annotations

import os

from caravel_lite import DatabaseQueue, QueueOutbox, open_database

from fastapi_app.app import create_app
from fastapi_app.signups import registry

_app_db = open_database(os.environ["APP_DATABASE_URL"])
_queue = DatabaseQueue(open_database(os.environ["CARAVEL_DATABASE_URL"]), registry)
app = create_app(_app_db, _queue, QueueOutbox(_app_db, registry, _queue.options))
