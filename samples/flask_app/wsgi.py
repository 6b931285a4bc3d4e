"""The app for a WSGI server (``flask --app flask_app.wsgi run``, gunicorn ...)."""
from __future__ import annotations

import os

from caravel_lite import DatabaseQueue, open_database

from flask_app.app import create_app
from flask_app.shop import registry

_db = open_database(os.environ["SHOP_DATABASE_URL"])
app = create_app(_db, DatabaseQueue(_db, registry))
