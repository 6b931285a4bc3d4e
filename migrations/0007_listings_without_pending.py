"""The operator listings' indexes leave pending jobs out, where indexes can be partial.

0006 added ``caravel_jobs_queue_state_id`` and ``caravel_jobs_tenant_id_state_id``
(jobs newest first by queue or tenant, one state at a time). Every job is written
pending, so each enqueue wrote an entry into both, and on SQLite in WAL mode a commit
writes one page per B-tree its row is in. Measured on the raw INSERT of one job through
sqlite3 (WAL, synchronous=NORMAL, 2-core machine): about 140 us with them and 80 us
without, and 116,000 against 89,000 instructions (``valgrind --tool=callgrind``).

Where the dialect has partial indexes (SQLite, PostgreSQL) both are rebuilt, same
names and columns, ``WHERE state <> 'pending'``: enqueue writes no listing entry, a
claim adds them (it rewrote both entries before), later state changes move them as
before. Pending jobs are listed through the claim index instead, which holds
(queue, state) first and every pending job: a page of a queue's pending jobs is read
from it and sorted by id (the cost grows with that queue's pending jobs, not with the
history), see ``caravel_lite.admin.filters``.

Built in this script's transaction: on a large table it holds the jobs table's lock
while the two indexes are built (writers wait; on PostgreSQL readers too). On
MariaDB/MySQL (no partial indexes) nothing changes; the script is still recorded as
applied, so every database has the same migration history.
"""
from caravel_lite.dialect import dialect_of

# Frozen as of this revision.
TABLE = "caravel_jobs"
LISTINGS = (("caravel_jobs_queue_state_id", "queue, state, id"),
            ("caravel_jobs_tenant_id_state_id", "tenant_id, state, id"))
WHERE = " WHERE state <> 'pending'"


def _rebuild(db, where):
    dialect = dialect_of(db)
    if not dialect.partial_indexes:
        return
    for name, columns in LISTINGS:
        db.execute_sql(dialect.drop_index(name, TABLE))
        db.execute_sql(f"CREATE INDEX {name} ON {TABLE} ({columns}){where}")


def up(migrator, db):
    _rebuild(db, WHERE)


def down(migrator, db):
    _rebuild(db, "")
