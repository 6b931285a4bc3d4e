"""``python -m flask_app init-db``: create the tables in SHOP_DATABASE_URL."""
from __future__ import annotations

import os
import sys
from typing import List

from caravel_lite import open_database

from flask_app.shop import init_db


def main(argv: List[str]) -> int:
    if argv != ["init-db"]:
        print("usage: python -m flask_app init-db  (with SHOP_DATABASE_URL set)",
              file=sys.stderr)
        return 2
    db = open_database(os.environ["SHOP_DATABASE_URL"])
    with db.connection_context():
        init_db(db)
    print("tables ready")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
