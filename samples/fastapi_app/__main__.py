"""``python -m fastapi_app init-db``: migrate both databases and create the
customers table (APP_DATABASE_URL, CARAVEL_DATABASE_URL)."""
from __future__ import annotations

import os
import sys
from typing import List

from caravel_lite import migrate, open_database

from fastapi_app.signups import Customer, database


def main(argv: List[str]) -> int:
    if argv != ["init-db"]:
        print("usage: python -m fastapi_app init-db", file=sys.stderr)
        return 2
    app_db = open_database(os.environ["APP_DATABASE_URL"])
    queue_db = open_database(os.environ["CARAVEL_DATABASE_URL"])
    with app_db.connection_context(), queue_db.connection_context():
        migrate(app_db)    # the outbox table lives with the application's tables
        migrate(queue_db)  # the jobs table
        database.initialize(app_db)
        app_db.create_tables([Customer], safe=True)
    print("tables ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
