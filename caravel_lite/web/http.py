"""The little HTTP the dashboard needs on top of WSGI: a parsed request, a response,
and the headers every answer carries.

Written by hand rather than taken from a framework: the dashboard has a dozen routes,
GET pages and POST forms, and this keeps its only dependencies Jinja2 (templates with
autoescaping) and a2wsgi (the ASGI adapter).
"""
from __future__ import annotations

import http.cookies
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Tuple
from urllib.parse import parse_qs, quote, urlencode

WSGIEnviron = Dict[str, object]
StartResponse = Callable[..., object]

# A form is a few hidden fields and a button; anything larger is not ours.
MAX_FORM_BYTES = 64 * 1024

# Every page: no script or style from anywhere but this dashboard, no framing, no
# referrer leaking job ids to other sites, no MIME sniffing.
SECURITY_HEADERS: Tuple[Tuple[str, str], ...] = (
    ("Content-Security-Policy",
     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
     "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
)

STATUS_TEXT = {200: "OK", 303: "See Other", 400: "Bad Request", 401: "Unauthorized",
               403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed",
               413: "Payload Too Large", 500: "Internal Server Error"}


class HttpError(Exception):
    """Ends a request with ``status`` and a short plain message (escaped when shown)."""

    def __init__(self, status: int, message: str,
                 headers: Iterable[Tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = tuple(headers)


class Params:
    """Query or form fields: the first value of a name, or all of them."""

    def __init__(self, values: Mapping[str, List[str]]) -> None:
        self._values = {key: list(items) for key, items in values.items()}

    @classmethod
    def parse(cls, text: str) -> "Params":
        return cls(parse_qs(text, keep_blank_values=True, strict_parsing=False))

    def get(self, name: str, default: str = "") -> str:
        items = self._values.get(name)
        return items[0] if items else default

    def optional(self, name: str) -> Optional[str]:
        """The stripped value, or None when absent or blank (an empty filter)."""
        value = self.get(name).strip()
        return value or None

    def __contains__(self, name: str) -> bool:
        return name in self._values

    def items(self) -> List[Tuple[str, str]]:
        return [(key, value) for key, items in self._values.items() for value in items]


@dataclass(frozen=True)
class Request:
    method: str
    path: str            # below the mount point, always starting with "/"
    script_name: str     # the mount point ("" at the root)
    query: Params
    form: Params
    cookies: Mapping[str, str]
    environ: WSGIEnviron = field(repr=False)

    @classmethod
    def from_environ(cls, environ: WSGIEnviron) -> "Request":
        method = str(environ.get("REQUEST_METHOD", "GET")).upper()
        path = _wsgi_text(environ.get("PATH_INFO", "")) or "/"
        script_name = _wsgi_text(environ.get("SCRIPT_NAME", "")).rstrip("/")
        query = Params.parse(_wsgi_text(environ.get("QUERY_STRING", "")))
        form = Params({})
        if method == "POST":
            form = Params.parse(_read_form(environ))
        jar = http.cookies.SimpleCookie()
        try:
            jar.load(str(environ.get("HTTP_COOKIE", "")))
        except http.cookies.CookieError:
            jar = http.cookies.SimpleCookie()
        cookies = {name: morsel.value for name, morsel in jar.items()}
        return cls(method, path, script_name, query, form, cookies, environ)

    def header(self, name: str) -> str:
        return str(self.environ.get("HTTP_" + name.upper().replace("-", "_"), ""))

    def url(self, path: str, **params: object) -> str:
        """An absolute path below the mount point, with non-empty ``params``."""
        target = self.script_name + quote(path)
        kept = [(key, str(value)) for key, value in params.items()
                if value is not None and value != ""]
        return target + ("?" + urlencode(kept) if kept else "")

    @property
    def partial(self) -> bool:
        """The live-refresh script asks for the page's main part only."""
        return self.header("X-Caravel-Partial") == "1"


def _wsgi_text(value: object) -> str:
    # PEP 3333: environ strings are latin-1 decoded bytes; paths and queries are UTF-8.
    text = str(value)
    try:
        return text.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return text


def _read_form(environ: WSGIEnviron) -> str:
    content_type = str(environ.get("CONTENT_TYPE", "")).split(";")[0].strip().lower()
    try:
        length = int(str(environ.get("CONTENT_LENGTH") or 0))
    except ValueError:
        raise HttpError(400, "invalid Content-Length") from None
    if length > MAX_FORM_BYTES:
        raise HttpError(413, "form too large")
    body = environ["wsgi.input"].read(length) if length > 0 else b""  # type: ignore[attr-defined]
    if content_type not in ("application/x-www-form-urlencoded", ""):
        raise HttpError(400, "forms must be application/x-www-form-urlencoded")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise HttpError(400, "form is not UTF-8") from None


@dataclass
class Response:
    body: bytes
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    headers: List[Tuple[str, str]] = field(default_factory=list)

    @classmethod
    def redirect(cls, location: str) -> "Response":
        # 303: the browser follows a POST's answer with a GET, so reloading the result
        # page never repeats the action.
        return cls(b"", 303, "text/plain; charset=utf-8", [("Location", location)])

    @classmethod
    def text(cls, status: int, message: str) -> "Response":
        return cls(message.encode("utf-8") + b"\n", status, "text/plain; charset=utf-8")

    def send(self, start_response: StartResponse) -> List[bytes]:
        headers = [("Content-Type", self.content_type),
                   ("Content-Length", str(len(self.body)))]
        names = {name.lower() for name, _ in self.headers}
        headers += [h for h in SECURITY_HEADERS if h[0].lower() not in names]
        headers += self.headers
        start_response(f"{self.status} {STATUS_TEXT.get(self.status, 'OK')}", headers)
        return [self.body]
