"""The settings open_database gives SQLite connections, and how a caller's pragmas
combine with them (key by key: naming one keeps the others)."""
from __future__ import annotations

import sqlite3

from caravel_lite import open_database


def _pragma(db, name):
    return db.execute_sql(f"PRAGMA {name}").fetchone()[0]


def test_sqlite_connections_get_wal_and_a_busy_timeout(tmp_path):
    db = open_database(f"sqlite:///{tmp_path / 'q.db'}")
    try:
        assert _pragma(db, "journal_mode") == "wal"
        assert _pragma(db, "busy_timeout") == 5000
        assert _pragma(db, "wal_autocheckpoint") == 1000  # SQLite's own default
    finally:
        db.close()


def test_a_callers_pragmas_are_added_to_the_defaults_key_by_key(tmp_path):
    db = open_database(f"sqlite:///{tmp_path / 'q.db'}",
                       pragmas={"synchronous": "full", "wal_autocheckpoint": 500})
    try:
        assert _pragma(db, "synchronous") == 2  # FULL
        assert _pragma(db, "wal_autocheckpoint") == 500  # the caller's value wins
        assert _pragma(db, "journal_mode") == "wal"  # ours are kept
        assert _pragma(db, "busy_timeout") == 5000
    finally:
        db.close()


def test_pragmas_given_as_pairs_are_accepted_too(tmp_path):
    # Peewee takes pragmas as a dict or as (name, value) pairs.
    db = open_database(f"sqlite:///{tmp_path / 'q.db'}", pragmas=[("cache_size", -4000)])
    try:
        assert _pragma(db, "cache_size") == -4000
        assert _pragma(db, "journal_mode") == "wal"
    finally:
        db.close()


def test_a_pragma_given_as_none_is_left_unset(tmp_path):
    # A read-only connection cannot switch a rollback-journal file to WAL.
    path = tmp_path / "q.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    db = open_database("sqlite:///q.db", database=f"file:{path}?mode=ro", uri=True,
                       pragmas={"journal_mode": None, "query_only": 1})
    try:
        assert _pragma(db, "journal_mode") == "delete"
        assert _pragma(db, "busy_timeout") == 5000
    finally:
        db.close()
