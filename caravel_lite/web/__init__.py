"""The caravel_lite web dashboard (the optional extra ``web``: Jinja2 and a2wsgi).

``wsgi_app(...)`` for Flask, Django or any WSGI server, ``asgi_app(...)`` for FastAPI,
Starlette or any ASGI server, ``caravel-lite dashboard`` from the command line. The
pages read and act only through :class:`caravel_lite.QueueAdmin`, which sees every
tenant: a mounted dashboard needs authentication (``auth=``) unless the application
passes ``insecure_no_auth=True``; the command line's serves it without only on loopback.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Optional

from caravel_lite.web.app import Dashboard, DashboardSettings
from caravel_lite.web.auth import (Authenticator, PasswordAuth, TokenAuth,
                                   auth_from_environ)
from caravel_lite.web.mount import mount

__all__ = ["wsgi_app", "asgi_app", "Dashboard", "DashboardSettings", "Authenticator",
           "TokenAuth", "PasswordAuth", "auth_from_environ", "mount"]


def _admin(admin_or_db: Any) -> Any:
    import peewee

    if isinstance(admin_or_db, peewee.Database):
        from caravel_lite import QueueAdmin
        return QueueAdmin(admin_or_db)
    return admin_or_db


def wsgi_app(admin_or_db: Any, *, read_only: bool = False, show_payloads: bool = False,
             auth: Optional[Authenticator] = None, scheduler: Any = None,
             clock: Optional[Callable[[], datetime]] = None,
             csrf_secret: Optional[bytes] = None, refresh_seconds: int = 5,
             page_size: int = 50, insecure_no_auth: bool = False) -> Dashboard:
    """The dashboard as a WSGI application, over a ``QueueAdmin`` (or a Peewee
    database, for which one is made). ``auth`` is required (InvalidField naming it
    otherwise): the dashboard shows every tenant's jobs, and no request can prove it
    comes from this machine. ``insecure_no_auth=True`` instead serves it without
    authentication, view only, to requests from a loopback address to a loopback
    name, and logs a WARNING. Actions (replay, discard, delete) need ``auth`` and not
    ``read_only``; payloads are shown only with ``show_payloads``. Mount it under any
    prefix: its links follow SCRIPT_NAME."""
    settings = DashboardSettings(read_only=read_only, show_payloads=show_payloads,
                                 auth=auth, refresh_seconds=refresh_seconds,
                                 page_size=page_size, csrf_secret=csrf_secret,
                                 insecure_no_auth=insecure_no_auth)
    return Dashboard(_admin(admin_or_db), settings, clock=clock, scheduler=scheduler)


def asgi_app(admin_or_db: Any, **options: Any) -> Any:
    """The same dashboard as an ASGI application (``wsgi_app`` behind a2wsgi's
    adapter, which runs each request in a thread: the queue's calls are blocking).
    Mount it under any prefix: its links follow the ASGI root_path."""
    from a2wsgi import WSGIMiddleware

    return WSGIMiddleware(wsgi_app(admin_or_db, **options))  # type: ignore[arg-type]
