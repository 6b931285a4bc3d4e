"""``/metrics`` as its own WSGI application (what ``caravel-lite metrics`` serves, and
what an application may mount), under the dashboard's rules (caravel_lite.access):
with authentication every request must carry it; without, only a loopback client
asking for a loopback name, not relayed by a proxy, is answered, and a server
without authentication binds to loopback only. It needs neither Jinja2 nor the rest
of the dashboard."""
from __future__ import annotations

import logging
import socket
import socketserver
from typing import Any, Callable, Iterable, List, Optional, Tuple
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from caravel_lite.access import REALM, Authenticator, Bind, check_bind, local_request
from caravel_lite.errors import InvalidField
from caravel_lite.logfields import fields
from caravel_lite.metrics.collector import CONTENT_TYPE, QueueMetrics

log = logging.getLogger("caravel_lite.metrics")

PATH = "/metrics"
StartResponse = Callable[..., Any]
NEEDS_AUTH = ("a mounted metrics endpoint needs authentication (pass auth=...), or "
              "insecure_no_auth=True to answer loopback clients only")


class MetricsEndpoint:
    """WSGI: ``GET /metrics`` answers one scrape of ``metrics``; a database error
    answers 503 (the scrape fails, Prometheus marks the target down) and is logged."""

    def __init__(self, metrics: QueueMetrics, *, auth: Optional[Authenticator] = None,
                 insecure_no_auth: bool = False, bind: Optional[Bind] = None) -> None:
        if not isinstance(metrics, QueueMetrics):
            raise InvalidField("metrics", "must be a caravel_lite.metrics.QueueMetrics")
        if auth is None:
            if bind is not None:
                check_bind(bind, None)
            elif insecure_no_auth is not True:
                raise InvalidField("auth", NEEDS_AUTH)
        elif insecure_no_auth:
            raise InvalidField("insecure_no_auth", "contradicts auth=: give one of them")
        self.metrics = metrics
        self.auth = auth

    def __call__(self, environ: Any, start_response: StartResponse) -> Iterable[bytes]:
        status, content_type, body, headers = self._answer(environ)
        start_response(status, [("Content-Type", content_type),
                                ("Content-Length", str(len(body))),
                                ("Cache-Control", "no-store"), *headers])
        return [b"" if environ.get("REQUEST_METHOD") == "HEAD" else body]

    def _answer(self, environ: Any) -> Tuple[str, str, bytes, List[Tuple[str, str]]]:
        text = "text/plain; charset=utf-8"
        if self.auth is not None:
            if self.auth.authenticate(environ) is None:
                challenge = getattr(self.auth, "challenge", REALM)
                return ("401 Unauthorized", text, b"authentication required\n",
                        [("WWW-Authenticate", challenge)])
        elif not local_request(environ):
            return ("403 Forbidden", text, b"without authentication the metrics answer "
                    b"only on loopback: configure authentication to serve them beyond "
                    b"this machine\n", [])
        if environ.get("PATH_INFO", "") != PATH:
            return "404 Not Found", text, b"not found\n", []
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return "405 Method Not Allowed", text, b"method not allowed\n", [("Allow", "GET")]
        try:
            body = self.metrics.render()
        except Exception as exc:  # the database is away: this scrape fails, the next may not
            log.exception("metrics scrape failed", extra=fields(error_type=type(exc).__name__))
            return "503 Service Unavailable", text, b"metrics unavailable (see the log)\n", []
        return "200 OK", CONTENT_TYPE, body, []


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """Access lines go to logging (debug), not to stderr."""

    def log_request(self, code: object = "-", size: object = "-") -> None:
        log.debug("%s %s %s", self.command, self.path.split("?")[0], code,
                  extra=fields(http_method=self.command, http_path=self.path.split("?")[0],
                               http_status=code))

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s", format % args, extra=fields(reason=format % args))


def make_metrics_server(app: MetricsEndpoint, bind: Bind) -> WSGIServer:
    """A threaded server for ``app`` on ``bind`` (port 0 picks one: read
    ``server_port``); call ``serve_forever()`` and, from another thread, ``shutdown()``."""
    server_class = _ThreadingServer6 if ":" in bind.host else _ThreadingServer
    return make_server(bind.host, bind.port, app, server_class=server_class,
                       handler_class=_QuietHandler)
