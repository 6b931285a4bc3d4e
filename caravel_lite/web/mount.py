"""Mounting the dashboard's WSGI app under a path prefix of another WSGI app (Django's
``application`` in wsgi.py, or any other), without a framework's dispatcher."""
from __future__ import annotations

from typing import Any, Dict, Iterable

from caravel_lite.errors import InvalidField


def mount(outer: Any, prefix: str, dashboard: Any) -> Any:
    """A WSGI app that sends requests under ``prefix`` (``"/ops/queue"``) to
    ``dashboard`` (with SCRIPT_NAME extended, so its links carry the prefix) and every
    other request to ``outer``."""
    if not isinstance(prefix, str) or not prefix.startswith("/") or prefix.endswith("/"):
        raise InvalidField("prefix", "must start with '/' and not end with it, e.g. /ops/queue")

    def app(environ: Dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") or ""
        if path == prefix or path.startswith(prefix + "/"):
            inner = dict(environ)
            inner["SCRIPT_NAME"] = environ.get("SCRIPT_NAME", "") + prefix
            inner["PATH_INFO"] = path[len(prefix):] or "/"
            answer: Iterable[bytes] = dashboard(inner, start_response)
            return answer
        answer = outer(environ, start_response)
        return answer
    return app
