"""PyMySQL's connections with the TLS context of its PREFERRED mode built once per
process instead of once per connection.

Given no TLS option, PyMySQL (1.1 and later) tries TLS and falls back to plain TCP when
the server offers none. To do so it builds an ``ssl.SSLContext`` for every new
connection, loading the system's certificate store each time, although that context
verifies nothing (no CA given: ``CERT_NONE``, no host name check). That load was 32 of
the 34 ms a connection to a local MariaDB took here, paid by every worker start, CLI
command and metrics scrape (which opens its own connection: issue 28). The context is
the same for every such connection, and an ``SSLContext`` may be shared by threads and
connections, so the first one built is kept and handed to the later ones.

Only that case is touched: TLS options the application gives (``ssl_ca``, ``ssl=...``,
``ssl_disabled``) reach PyMySQL unchanged and build their context as before.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, Optional

__all__ = ["SharedPreferredTls", "connection_class", "mysql_class", "applies"]

_lock = threading.Lock()
_shared: Optional[Any] = None        # the PREFERRED-mode context, once built
_class: Optional[type] = None        # the Connection subclass, once made


def connection_class() -> type:
    """``pymysql.connections.Connection`` with the PREFERRED-mode context shared."""
    global _class
    if _class is None:
        from pymysql.connections import Connection  # the optional driver, imported late

        def _create_ssl_ctx(self: Any, sslp: Any) -> Any:
            if not isinstance(sslp, dict) or sslp:
                return Connection._create_ssl_ctx(self, sslp)  # the application's own
            global _shared
            with _lock:
                if _shared is None:
                    _shared = Connection._create_ssl_ctx(self, sslp)
                return _shared

        _class = type("Connection", (Connection,), {"_create_ssl_ctx": _create_ssl_ctx})
    return _class


class SharedPreferredTls:
    """Mixed into the MariaDB/MySQL class :func:`caravel_lite.open_database` returns:
    Peewee's ``MySQLDatabase._connect`` with :func:`connection_class` in place of
    ``pymysql.connect`` (the same arguments)."""

    database: Any
    connect_params: Dict[str, Any]

    def _connect(self) -> Any:
        return connection_class()(database=self.database, autocommit=True,
                                  **self.connect_params)


_classes: Dict[type, type] = {}


def applies() -> bool:
    """Whether Peewee connects to MariaDB/MySQL through PyMySQL here (it prefers it to
    mysqlclient, which builds no context of its own and is left alone)."""
    import peewee

    driver = getattr(peewee, "mysql", None)
    return driver is not None and getattr(driver, "__name__", "") == "pymysql"


def mysql_class(cls: type) -> type:
    """A subclass of Peewee's MariaDB/MySQL class ``cls`` with
    :class:`SharedPreferredTls` mixed in (made once per class)."""
    with _lock:
        if cls not in _classes:
            _classes[cls] = type(cls.__name__, (SharedPreferredTls, cls), {})
        return _classes[cls]
