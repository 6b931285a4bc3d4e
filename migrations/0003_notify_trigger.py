"""Announce jobs that become pending, for idle workers (caravel_lite.wakeup).

Where the dialect's change signal is "notify" (PostgreSQL), a trigger on the jobs table
calls pg_notify when a row is inserted as pending or an UPDATE makes it pending again
(a retry, a reclaimed expired lease, a replay). The notification is queued inside the
enqueuing transaction and delivered by the server at commit: enqueue makes no extra
round trip, and a rolled-back job is never announced.

One fixed channel serves every queue (channel names are identifiers, queue names are
not); the payload is "<queue> <available_at ms>", so a listener ignores other queues
and learns when a delayed job falls due without reading the table. Elsewhere this
script changes nothing; it is still recorded as applied, so every database has the
same migration history.
"""
from caravel_lite.dialect import dialect_of

# Frozen as of this revision (caravel_lite.wakeup.CHANNEL must stay equal to it).
CHANNEL = "caravel_jobs"
PENDING = "pending"

FUNCTION = "caravel_jobs_notify_pending"
ON_INSERT = "caravel_jobs_notify_insert"
ON_UPDATE = "caravel_jobs_notify_update"


def up(migrator, db):
    if dialect_of(db).change_signal != "notify":
        return
    db.execute_sql(f"""
        CREATE FUNCTION {FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            PERFORM pg_notify('{CHANNEL}', NEW.queue || ' ' || NEW.available_at);
            RETURN NULL;
        END
        $$""")
    db.execute_sql(
        f"CREATE TRIGGER {ON_INSERT} AFTER INSERT ON caravel_jobs FOR EACH ROW "
        f"WHEN (NEW.state = '{PENDING}') EXECUTE FUNCTION {FUNCTION}()")
    # Only changes that make a row pending, or move a pending row's due time: claims,
    # renewals and completions (the bulk of the updates) announce nothing.
    db.execute_sql(
        f"CREATE TRIGGER {ON_UPDATE} AFTER UPDATE OF state, available_at ON caravel_jobs "
        f"FOR EACH ROW WHEN (NEW.state = '{PENDING}' AND (OLD.state <> NEW.state "
        f"OR OLD.available_at <> NEW.available_at)) EXECUTE FUNCTION {FUNCTION}()")


def down(migrator, db):
    if dialect_of(db).change_signal != "notify":
        return
    db.execute_sql(f"DROP TRIGGER IF EXISTS {ON_UPDATE} ON caravel_jobs")
    db.execute_sql(f"DROP TRIGGER IF EXISTS {ON_INSERT} ON caravel_jobs")
    db.execute_sql(f"DROP FUNCTION IF EXISTS {FUNCTION}()")
