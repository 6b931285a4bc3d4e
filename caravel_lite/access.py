"""Who may use the dashboard and the metrics endpoint: authentication read from
environment variables, and the rule that keeps an unauthenticated server on loopback.
One module for both (the metrics endpoint needs none of the dashboard's extra), and
re-exported by ``caravel_lite.web.auth``.

Credentials never come from the command line (other users of the machine can read a
process's arguments): ``CARAVEL_DASHBOARD_TOKEN``, or ``CARAVEL_DASHBOARD_USER`` with
``CARAVEL_DASHBOARD_PASSWORD``. A browser sends them as HTTP Basic credentials (with a
token, any user name and the token as the password); scripts may send
``Authorization: Bearer <token>``.
"""
from __future__ import annotations

import base64
import hmac
import ipaddress
import socket
from dataclasses import dataclass, field
from typing import Mapping, Optional, Protocol

from caravel_lite.errors import InvalidField

TOKEN_VARIABLE = "CARAVEL_DASHBOARD_TOKEN"
USER_VARIABLE = "CARAVEL_DASHBOARD_USER"
PASSWORD_VARIABLE = "CARAVEL_DASHBOARD_PASSWORD"
MIN_TOKEN_LENGTH = 16
MIN_PASSWORD_LENGTH = 8
REALM = 'Basic realm="caravel_lite dashboard", charset="UTF-8"'


class Authenticator(Protocol):
    """Decides whether a request is authenticated. ``authenticate`` gets the WSGI
    environ and returns who it is, or None. An application that mounts the dashboard
    behind its own login may pass its own object with this method."""

    def authenticate(self, environ: Mapping[str, object]) -> Optional[str]:
        ...


def _same(given: str, expected: str) -> bool:
    # Constant time, so the comparison does not reveal how much of a guess was right.
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def _credentials(environ: Mapping[str, object]) -> "tuple[str, Optional[str], Optional[str]]":
    """(scheme, user, secret) from the Authorization header; ("", None, None) without."""
    header = str(environ.get("HTTP_AUTHORIZATION", "")).strip()
    scheme, _, value = header.partition(" ")
    scheme = scheme.lower()
    if scheme == "bearer":
        return scheme, None, value.strip()
    if scheme == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return scheme, None, None
        user, sep, password = decoded.partition(":")
        return (scheme, user, password) if sep else (scheme, None, None)
    return "", None, None


@dataclass(frozen=True)
class TokenAuth:
    """One shared secret: ``Authorization: Bearer <token>``, or Basic with any user
    name and the token as the password."""

    token: str = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.token, str) or len(self.token) < MIN_TOKEN_LENGTH:
            raise InvalidField(TOKEN_VARIABLE,
                               f"must be at least {MIN_TOKEN_LENGTH} characters")

    def authenticate(self, environ: Mapping[str, object]) -> Optional[str]:
        _, _, secret = _credentials(environ)
        if secret is None or not _same(secret, self.token):
            return None
        return "token"


@dataclass(frozen=True)
class PasswordAuth:
    """One user name and password, sent as HTTP Basic credentials."""

    user: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.user, str) or not self.user or ":" in self.user:
            raise InvalidField(USER_VARIABLE, "must be a non-empty name without ':'")
        if not isinstance(self.password, str) or len(self.password) < MIN_PASSWORD_LENGTH:
            raise InvalidField(PASSWORD_VARIABLE,
                               f"must be at least {MIN_PASSWORD_LENGTH} characters")

    def authenticate(self, environ: Mapping[str, object]) -> Optional[str]:
        scheme, user, secret = _credentials(environ)
        if scheme != "basic" or user is None or secret is None:
            return None
        # Both comparisons always run, so timing does not tell which part was wrong.
        user_ok = _same(user, self.user)
        password_ok = _same(secret, self.password)
        return self.user if user_ok and password_ok else None


def auth_from_environ(environ: Mapping[str, str]) -> Optional[Authenticator]:
    """The authentication the environment configures, or None when it configures
    none. Setting both a token and a user, or a user without a password, is an error
    that names the variable."""
    token = environ.get(TOKEN_VARIABLE) or None
    user = environ.get(USER_VARIABLE) or None
    password = environ.get(PASSWORD_VARIABLE) or None
    if token is not None and (user is not None or password is not None):
        raise InvalidField(TOKEN_VARIABLE,
                           f"set either it or {USER_VARIABLE}/{PASSWORD_VARIABLE}, not both")
    if token is not None:
        return TokenAuth(token)
    if user is not None or password is not None:
        if user is None:
            raise InvalidField(USER_VARIABLE, f"is required with {PASSWORD_VARIABLE}")
        if password is None:
            raise InvalidField(PASSWORD_VARIABLE, f"is required with {USER_VARIABLE}")
        return PasswordAuth(user, password)
    return None


@dataclass(frozen=True)
class Bind:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_bind(text: str) -> Bind:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) into a :class:`Bind`."""
    host, sep, port_text = text.strip().rpartition(":")
    if not sep or not host:
        raise InvalidField("bind", "must be HOST:PORT, e.g. 127.0.0.1:8080")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise InvalidField("bind", "port must be a number") from None
    if not 0 <= port <= 65535:
        raise InvalidField("bind", "port must be between 0 and 65535")
    return Bind(host, port)


def is_loopback(host: str) -> bool:
    """True when every address ``host`` names is a loopback address (a name is
    resolved, and all its addresses must be loopback; an unresolvable name is not)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except (socket.gaierror, UnicodeError):
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(
        ipaddress.ip_address(str(address).split("%")[0]).is_loopback for address in addresses)


def check_bind(bind: Bind, auth: Optional[Authenticator]) -> None:
    """Refuse a non-loopback bind when no authentication is configured: the dashboard
    shows every tenant's jobs."""
    if auth is None and not is_loopback(bind.host):
        raise InvalidField(
            "bind", f"{bind.host} is not a loopback address: set {TOKEN_VARIABLE} (or "
                    f"{USER_VARIABLE} and {PASSWORD_VARIABLE}) to serve beyond this machine")


def loopback_peer(environ: Mapping[str, object]) -> bool:
    """The client's address (REMOTE_ADDR) is a loopback address; anything else,
    including no address or a name, is not. A server listening on both IPv6 and IPv4
    (``::``) sees an IPv4 client as ``::ffff:a.b.c.d``: 127.0.0.1 in that form is
    loopback too (the kernel takes 127/8 sources only from this machine)."""
    peer = str(environ.get("REMOTE_ADDR") or "").strip()
    try:
        address = ipaddress.ip_address(peer.split("%")[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return bool((mapped if mapped is not None else address).is_loopback)


# Headers a reverse proxy adds to say whom it relays (RFC 7239 and the de facto ones).
RELAY_HEADERS = ("HTTP_FORWARDED", "HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_HOST",
                 "HTTP_X_REAL_IP")


def relayed(environ: Mapping[str, object]) -> bool:
    """The request says a proxy relayed it: its REMOTE_ADDR is the proxy's, not the
    client's, so it proves nothing about where the client is. (A proxy that adds none
    of these headers cannot be told apart: one in front of an unauthenticated
    dashboard serves it to the proxy's clients.)"""
    return any(name in environ for name in RELAY_HEADERS)


def loopback_host(environ: Mapping[str, object]) -> bool:
    host = str(environ.get("HTTP_HOST") or environ.get("SERVER_NAME", ""))
    host = host.strip().lower()
    if host.startswith("["):
        host = host[1:host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def local_request(environ: Mapping[str, object]) -> bool:
    """Whether an unauthenticated server may answer this request: the peer's address
    must be loopback (a remote client can send any Host header), and so must the Host
    header, which defeats DNS rebinding, where another site's name is made to resolve
    to 127.0.0.1 so that its scripts can read the answer; a request a proxy relayed
    comes from the proxy's address, loopback when the proxy runs here, whoever its
    client is."""
    return loopback_peer(environ) and loopback_host(environ) and not relayed(environ)
