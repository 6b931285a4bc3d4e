"""The dashboard as a WSGI application: routing, the authentication gate, CSRF, error
pages and static assets. Pages (pages.py) and actions (actions.py) only call the
``QueueAdmin`` object; nothing here builds SQL.
"""
from __future__ import annotations

import contextlib
import logging
import re
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any, Callable, Iterator, List, Optional, Pattern, Tuple

from caravel_lite.access import local_request
from caravel_lite.clock import system_clock
from caravel_lite.errors import InvalidField
from caravel_lite.validation import check_int
from caravel_lite.web import actions, control, metrics_page, pages, workflows
from caravel_lite.web.auth import (PASSWORD_VARIABLE, REALM, TOKEN_VARIABLE,
                                   USER_VARIABLE, Authenticator, Bind, check_bind)
from caravel_lite.web.csrf import CsrfGuard
from caravel_lite.web.history import DayHistory
from caravel_lite.web.http import (HttpError, Request, Response, StartResponse,
                                   WSGIEnviron)
from caravel_lite.web.render import make_environment, render

log = logging.getLogger("caravel_lite.web")

MAX_PAGE_SIZE = 500
NEEDS_AUTH = (
    "a mounted dashboard needs authentication (it shows every tenant's jobs, and a "
    "request cannot prove it comes from this machine): pass auth=TokenAuth(...), "
    f"PasswordAuth(...), auth_from_environ(os.environ) with {TOKEN_VARIABLE} (or "
    f"{USER_VARIABLE} and {PASSWORD_VARIABLE}) set, or the application's own "
    "Authenticator; insecure_no_auth=True serves it without, to loopback clients only")
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon"}


@dataclass(frozen=True)
class DashboardSettings:
    """How a dashboard behaves.

    ``auth`` decides who may see the pages. A dashboard needs it, because locality
    cannot be proven from a request (a Host header is whatever the client sends),
    unless ``insecure_no_auth`` says, loudly, that the application serves it on
    loopback only (logged at WARNING when the dashboard is made); the command line's
    own server needs neither on a loopback address (``Dashboard(bind=...)``). Without
    ``auth`` the dashboard only shows, and answers only requests from a loopback
    address to a loopback name that no proxy says it relayed. ``read_only`` removes every action. ``show_payloads``
    shows job payloads on the job page; they are never read otherwise.
    ``csrf_secret`` must be shared by all processes serving one dashboard.
    """

    read_only: bool = False
    show_payloads: bool = False
    auth: Optional[Authenticator] = None
    refresh_seconds: int = 5
    page_size: int = 50
    csrf_secret: Optional[bytes] = None
    insecure_no_auth: bool = False

    def __post_init__(self) -> None:
        if self.insecure_no_auth is not False and self.insecure_no_auth is not True:
            raise InvalidField("insecure_no_auth", "must be True or False")
        if self.insecure_no_auth and self.auth is not None:
            raise InvalidField("insecure_no_auth", "contradicts auth=: give one of them")
        check_int("refresh_seconds", self.refresh_seconds, 1, 3600)
        check_int("page_size", self.page_size, 1, MAX_PAGE_SIZE)
        if self.csrf_secret is not None and (not isinstance(self.csrf_secret, bytes)
                                             or len(self.csrf_secret) < 16):
            raise InvalidField("csrf_secret", "must be at least 16 bytes")

    @property
    def actions_enabled(self) -> bool:
        return not self.read_only and self.auth is not None


Handler = Callable[["Page", "re.Match[str]"], Response]


class Page:
    """One request being answered: the request, the admin, the settings, and how to
    render a template with what every page shows (navigation, CSRF token)."""

    def __init__(self, app: "Dashboard", request: Request, csrf_cookie: str) -> None:
        self.app = app
        self.request = request
        self.admin = app.admin
        self.scheduler = app.scheduler
        self.settings = app.settings
        self.csrf_token = app.csrf.token(csrf_cookie)

    def now(self) -> datetime:
        return self.app.clock()

    def render(self, template: str, status: int = 200, **context: Any) -> Response:
        context.setdefault("nav", "")
        context.setdefault("notice", None)
        context.setdefault("error", None)
        body = render(self.app.templates, template,
                      url=self.request.url, request=self.request, settings=self.settings,
                      csrf_token=self.csrf_token, can_act=self.settings.actions_enabled,
                      has_schedules=self.scheduler is not None,
                      layout="partial.html" if self.request.partial else "layout.html",
                      **context)
        return Response(body, status)


class Dashboard:
    """The WSGI application. ``admin`` is a :class:`caravel_lite.QueueAdmin`; the
    optional ``scheduler`` (a :class:`caravel_lite.QueueScheduler`) adds the
    Schedules page."""

    def __init__(self, admin: Any, settings: DashboardSettings = DashboardSettings(),
                 clock: Optional[Callable[[], datetime]] = None,
                 scheduler: Any = None, *, bind: Optional[Bind] = None) -> None:
        """``bind`` is for the command line's own server only: the address it listens
        on, which without ``auth`` must be loopback (checked here again). An
        application that mounts the dashboard passes ``auth`` (or
        ``insecure_no_auth=True``) in ``settings``."""
        if settings.auth is None:
            if bind is not None:
                check_bind(bind, None)
            elif not settings.insecure_no_auth:
                raise InvalidField("auth", NEEDS_AUTH)
            else:
                log.warning("caravel_lite dashboard without authentication "
                            "(insecure_no_auth=True): it shows every tenant's jobs to any "
                            "request from a loopback address to a loopback name; serve it "
                            "on loopback only")
        self.admin = admin
        self.scheduler = scheduler
        self.settings = settings
        self.clock = clock or getattr(admin, "clock", None) or system_clock
        self.csrf = CsrfGuard(settings.csrf_secret)
        self.history = DayHistory()
        self.templates = make_environment(self.clock)
        uuid_part = r"(?P<job_id>[0-9a-fA-F-]{32,36})"
        self.routes: List[Tuple[str, Pattern[str], Handler]] = [
            ("GET", re.compile(r"/"), pages.overview),
            ("GET", re.compile(r"/jobs"), pages.jobs),
            ("GET", re.compile(rf"/jobs/{uuid_part}"), pages.job),
            ("GET", re.compile(r"/dead-letters"), pages.dead_letters),
            ("GET", re.compile(r"/schedules"), pages.schedules),
            ("GET", re.compile(r"/workers"), control.workers),
            ("GET", re.compile(r"/workflows"), workflows.workflows),
            ("GET", re.compile(r"/metrics"), metrics_page.metrics),
            ("POST", re.compile(r"/actions/(?P<action>replay|discard|delete|cancel)"),
             actions.act),
            ("POST", re.compile(r"/actions/(?P<action>pause|resume)"), control.toggle),
        ]

    def warm(self) -> None:
        """Read the last day for the overview's day chart now, so that the first
        overview does not wait for it (the command line calls this before serving)."""
        with _connection(getattr(self.admin, "db", None)):
            pages.overview_figures(self.admin, self.history, self.clock(), None)

    def __call__(self, environ: WSGIEnviron, start_response: StartResponse) -> List[bytes]:
        try:
            request = Request.from_environ(environ)
            response = self._answer(request)
        except HttpError as exc:
            response = Response.text(exc.status, exc.message)
            response.headers.extend(exc.headers)
        except Exception:  # the page must not show internals; the log has them
            log.exception("dashboard request failed")
            response = Response.text(500, "internal error (see the server's log)")
        return response.send(start_response)

    def _answer(self, request: Request) -> Response:
        if self.settings.auth is not None:
            if self.settings.auth.authenticate(request.environ) is None:
                challenge = getattr(self.settings.auth, "challenge", REALM)
                raise HttpError(401, "authentication required",
                                [("WWW-Authenticate", challenge)])
        elif not local_request(request.environ):
            # Without authentication only a browser on this machine may read the pages:
            # the peer's address must be loopback (a remote client can send any Host
            # header), and so must the Host header, which defeats DNS rebinding, where
            # another site's name is made to resolve to 127.0.0.1 so that its scripts
            # can read them. A request a proxy relayed comes from the proxy's address,
            # loopback when the proxy runs here, whoever its client is.
            raise HttpError(403, "without authentication the dashboard answers only "
                                 "on loopback (from 127.0.0.1 or ::1, to 127.0.0.1, ::1 or "
                                 "localhost, not relayed by a proxy): configure "
                                 "authentication to serve it beyond this machine")
        if request.path.startswith("/static/"):
            return self._static(request)
        handler, match = self._route(request)
        cookie, is_new = self.csrf.cookie_value(request)
        if request.method == "POST":
            if not self.settings.actions_enabled:
                raise HttpError(403, "this dashboard is read-only" if self.settings.read_only
                                else "actions need authentication: set "
                                     "CARAVEL_DASHBOARD_TOKEN (or a user and password)")
            refused = self.csrf.check(request)
            if refused is not None:
                raise HttpError(403, refused)
        page = Page(self, request, cookie)
        try:
            with _connection(getattr(self.admin, "db", None)):
                response = handler(page, match)
        except InvalidField as exc:
            response = page.render("error.html", status=400, message=str(exc))
        if is_new:
            response.headers.append(self.csrf.set_cookie_header(request, cookie))
        return response

    def _route(self, request: Request) -> Tuple[Handler, "re.Match[str]"]:
        allowed = set()
        for method, pattern, handler in self.routes:
            match = pattern.fullmatch(request.path)
            if match:
                if method == request.method:
                    return handler, match
                allowed.add(method)
        if allowed:
            raise HttpError(405, "method not allowed", [("Allow", ", ".join(sorted(allowed)))])
        raise HttpError(404, "not found")

    def _static(self, request: Request) -> Response:
        if request.method != "GET":
            raise HttpError(405, "method not allowed", [("Allow", "GET")])
        name = request.path[len("/static/"):]
        suffix = name[name.rfind("."):] if "." in name else ""
        # Only plain file names: no directories, so nothing outside static/ is served.
        if not re.fullmatch(r"[a-z0-9_-]+\.[a-z]+", name) or suffix not in STATIC_TYPES:
            raise HttpError(404, "not found")
        asset = resources.files("caravel_lite.web").joinpath("static", name)
        if not asset.is_file():
            raise HttpError(404, "not found")
        return Response(asset.read_bytes(), 200, STATIC_TYPES[suffix],
                        [("Cache-Control", "max-age=3600")])


@contextlib.contextmanager
def _connection(db: Any) -> Iterator[None]:
    """A connection for the request: opened and closed here unless the application
    that mounts the dashboard already holds one in this thread."""
    if db is None or not db.is_closed():
        yield
        return
    db.connect()
    try:
        yield
    finally:
        db.close()
