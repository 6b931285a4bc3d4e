"""What the command-line worker loads::

    caravel-lite worker flask_app.worker:queue_from_env --queue receipts

``queue_from_env`` is called once by the worker: it opens SHOP_DATABASE_URL, points
the shop's models at it (the handler reads and writes them) and returns the queue.
"""
from __future__ import annotations

import os

from caravel_lite import DatabaseQueue, open_database

from flask_app.shop import database, registry


def queue_from_env() -> DatabaseQueue:
    db = open_database(os.environ["SHOP_DATABASE_URL"])
    database.initialize(db)
    return DatabaseQueue(db, registry)
