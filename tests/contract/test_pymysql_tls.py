"""MariaDB/MySQL through PyMySQL: the TLS context of PyMySQL's PREFERRED mode (no TLS
option given) is built once per process and shared by every later connection, instead
of loading the certificate store at each connect (caravel_lite.pymysql_tls); TLS
options the application gives are PyMySQL's as before."""
from __future__ import annotations

import pytest

from caravel_lite import open_database
from caravel_lite.pymysql_tls import connection_class


def _connection(url: str):
    db = open_database(url)
    db.connect()
    try:
        assert db.execute_sql("SELECT 1").fetchone() == (1,)
        conn = db.connection()
        return conn.ssl, getattr(conn, "ctx", None)
    finally:
        db.close()


@pytest.mark.backends("mysql")
def test_connections_without_tls_options_share_one_preferred_context(db_url):
    first_ssl, first = _connection(db_url)
    second_ssl, second = _connection(db_url)
    assert first_ssl and second_ssl  # PREFERRED: TLS is still tried at every connect
    assert first is not None and second is first


@pytest.mark.backends("mysql")
def test_tls_options_the_application_gives_reach_pymysql_unchanged(db_url):
    separator = "&" if "?" in db_url else "?"
    disabled_ssl, disabled = _connection(f"{db_url}{separator}ssl_disabled=true")
    assert not disabled_ssl and disabled is None
    _, shared = _connection(db_url)
    # A context the application's own options describe (here a dict, as PyMySQL's
    # ``ssl=`` takes) is built by PyMySQL for each connection, never the shared one.
    make = connection_class()._create_ssl_ctx
    own = make(None, {"check_hostname": False})
    assert own is not shared and make(None, {"check_hostname": False}) is not own
