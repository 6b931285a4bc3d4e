"""An interrupt raised while a statement waits on the server (SIGINT's
KeyboardInterrupt, a SIGTERM handler's sys.exit) reaches the caller as itself, also
inside ``db.atomic()``: the connection it cut short is closed, never sent a ROLLBACK
(on MariaDB that ROLLBACK failed with InterfaceError(0, '') over the interrupt, which
callers then took for a lost connection), nothing of the transaction is kept, and the
next statement runs on a new connection. (SQLite's statements wait inside the
driver: an interrupt lands after them.)"""
from __future__ import annotations

import signal
import sys
import threading

import pytest

from caravel_lite import open_database

pytestmark = pytest.mark.backends("postgres", "mysql")


@pytest.mark.parametrize("how", ["sigint", "sigterm-exit"])
def test_an_interrupt_during_a_statement_in_a_transaction_reaches_the_caller(
        db, db_url, how):
    db.execute_sql("DROP TABLE IF EXISTS interrupted_probe")  # the database is shared
    db.execute_sql("CREATE TABLE interrupted_probe (id INT PRIMARY KEY, v INT)")
    db.execute_sql("INSERT INTO interrupted_probe VALUES (1, 0)")
    held, release = threading.Event(), threading.Event()

    def lock_the_row() -> None:
        locker = open_database(db_url)
        locker.execute_sql("BEGIN")
        locker.execute_sql("SELECT v FROM interrupted_probe WHERE id = 1 FOR UPDATE")
        held.set()
        release.wait(30)
        locker.execute_sql("ROLLBACK")
        locker.close()

    threading.Thread(target=lock_the_row, daemon=True).start()
    assert held.wait(10)
    victim = open_database(db_url)
    victim.execute_sql("SELECT 1")
    main = threading.main_thread().ident
    signum = signal.SIGINT if how == "sigint" else signal.SIGTERM
    previous = signal.getsignal(signal.SIGTERM)
    if how == "sigterm-exit":
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
    threading.Timer(0.3, signal.pthread_kill, (main, signum)).start()
    try:
        with pytest.raises(KeyboardInterrupt if how == "sigint" else SystemExit):
            with victim.atomic():
                victim.execute_sql("UPDATE interrupted_probe SET v = 7 WHERE id = 1")
    finally:
        signal.signal(signal.SIGTERM, previous)
        release.set()
    try:
        assert victim.execute_sql("SELECT v FROM interrupted_probe").fetchall()[0][0] == 0
    finally:
        victim.close()
        db.execute_sql("DROP TABLE interrupted_probe")
