"""Cross-site request forgery protection for the dashboard's forms.

A signed double-submit cookie: the first page a browser loads sets a random,
HttpOnly, SameSite=Strict cookie; every form carries the HMAC of that cookie under a
server secret; a POST is accepted only when both are present and match. Another site
can make a browser send the cookie (and cached Basic credentials) but can read neither
it nor the page, so it cannot produce the form field; and without the secret, a
planted cookie is useless. Requests that the browser itself labels cross-site are
refused as well.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Optional, Tuple

from caravel_lite.web.http import Request

COOKIE = "caravel_csrf"
FIELD = "csrf"


class CsrfGuard:
    """Issues and checks form tokens. ``secret`` must be the same in every process
    that serves one dashboard (a random one per process otherwise)."""

    def __init__(self, secret: Optional[bytes] = None) -> None:
        self._secret = secret if secret is not None else secrets.token_bytes(32)

    def cookie_value(self, request: Request) -> Tuple[str, bool]:
        """(the browser's cookie value, whether it is new and must be set)."""
        value = request.cookies.get(COOKIE, "")
        if _well_formed(value):
            return value, False
        return secrets.token_hex(32), True

    def token(self, cookie_value: str) -> str:
        return hmac.new(self._secret, cookie_value.encode("ascii"), hashlib.sha256).hexdigest()

    def set_cookie_header(self, request: Request, cookie_value: str) -> Tuple[str, str]:
        secure = "; Secure" if request.environ.get("wsgi.url_scheme") == "https" else ""
        path = request.script_name or "/"
        return ("Set-Cookie", f"{COOKIE}={cookie_value}; Path={path}; HttpOnly; "
                              f"SameSite=Strict{secure}")

    def check(self, request: Request) -> Optional[str]:
        """None when the POST carries a valid token, else why it is refused."""
        if request.header("Sec-Fetch-Site") == "cross-site":
            return "cross-site request"
        cookie = request.cookies.get(COOKIE, "")
        if not _well_formed(cookie):
            return "missing CSRF cookie (reload the page)"
        given = request.form.get(FIELD)
        if not given or not hmac.compare_digest(given.encode("ascii", "replace"),
                                                self.token(cookie).encode("ascii")):
            return "invalid CSRF token (reload the page)"
        return None


def _well_formed(value: str) -> bool:
    return len(value) == 64 and all(c in "0123456789abcdef" for c in value)
