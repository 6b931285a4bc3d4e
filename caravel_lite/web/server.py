"""Serving the dashboard from the command line: the standard library's WSGI server
with a thread per request (enough for a few operators' browsers on one machine).

For anything more, mount the WSGI or ASGI app in the server the application already
runs (README, "Dashboard").
"""
from __future__ import annotations

import logging
import socket
import socketserver
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from caravel_lite.logfields import fields
from caravel_lite.web.auth import Bind

log = logging.getLogger("caravel_lite.web")


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True      # a slow browser never holds up shutdown
    allow_reuse_address = True


class _ThreadingServer6(_ThreadingServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    """Access lines go to logging (debug), not to stderr; the query string is left
    out because filters can name tenants."""

    def log_request(self, code: object = "-", size: object = "-") -> None:
        log.debug("%s %s %s", self.command, self.path.split("?")[0], code,
                  extra=fields(http_method=self.command, http_path=self.path.split("?")[0],
                               http_status=code))

    def log_message(self, format: str, *args: object) -> None:
        log.info("%s", format % args, extra=fields(reason=format % args))


def make_dashboard_server(app: Any, bind: Bind) -> WSGIServer:
    """A server bound to ``bind`` (port 0 picks a free one: read ``server_port``).
    Call ``serve_forever()`` and, from another thread, ``shutdown()``."""
    server_class = _ThreadingServer6 if ":" in bind.host else _ThreadingServer
    return make_server(bind.host, bind.port, app, server_class=server_class,
                       handler_class=_QuietHandler)
