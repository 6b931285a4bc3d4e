"""Authentication from environment variables and the loopback rule (no database)."""
from __future__ import annotations

import base64

import pytest

from caravel_lite.errors import InvalidField
from caravel_lite.web.auth import (Bind, PasswordAuth, TokenAuth, auth_from_environ,
                                   check_bind, is_loopback, parse_bind)

TOKEN = "t0ken-with-enough-length"


def basic(user: str, password: str) -> dict:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {raw}"}


def test_token_accepts_bearer_and_basic_password_only():
    auth = TokenAuth(TOKEN)
    assert auth.authenticate({"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}) == "token"
    assert auth.authenticate(basic("anyone", TOKEN)) == "token"
    assert auth.authenticate({"HTTP_AUTHORIZATION": f"Bearer {TOKEN}x"}) is None
    assert auth.authenticate(basic(TOKEN, "nope")) is None
    assert auth.authenticate({}) is None
    assert auth.authenticate({"HTTP_AUTHORIZATION": "Basic !!!not-base64"}) is None


def test_password_needs_both_user_and_password():
    auth = PasswordAuth("ops", "s3cret-pass")
    assert auth.authenticate(basic("ops", "s3cret-pass")) == "ops"
    assert auth.authenticate(basic("ops", "wrong-pass")) is None
    assert auth.authenticate(basic("Ops", "s3cret-pass")) is None
    assert auth.authenticate({"HTTP_AUTHORIZATION": "Bearer s3cret-pass"}) is None


def test_secrets_are_not_in_repr():
    assert TOKEN not in repr(TokenAuth(TOKEN))
    assert "s3cret-pass" not in repr(PasswordAuth("ops", "s3cret-pass"))


def test_environment_configures_token_or_user_password():
    assert auth_from_environ({}) is None
    assert isinstance(auth_from_environ({"CARAVEL_DASHBOARD_TOKEN": TOKEN}), TokenAuth)
    auth = auth_from_environ({"CARAVEL_DASHBOARD_USER": "ops",
                              "CARAVEL_DASHBOARD_PASSWORD": "s3cret-pass"})
    assert isinstance(auth, PasswordAuth) and auth.user == "ops"


@pytest.mark.parametrize("environ, field", [
    ({"CARAVEL_DASHBOARD_TOKEN": "short"}, "CARAVEL_DASHBOARD_TOKEN"),
    ({"CARAVEL_DASHBOARD_TOKEN": TOKEN, "CARAVEL_DASHBOARD_USER": "ops"},
     "CARAVEL_DASHBOARD_TOKEN"),
    ({"CARAVEL_DASHBOARD_USER": "ops"}, "CARAVEL_DASHBOARD_PASSWORD"),
    ({"CARAVEL_DASHBOARD_PASSWORD": "s3cret-pass"}, "CARAVEL_DASHBOARD_USER"),
    ({"CARAVEL_DASHBOARD_USER": "ops", "CARAVEL_DASHBOARD_PASSWORD": "short"},
     "CARAVEL_DASHBOARD_PASSWORD"),
])
def test_bad_environment_names_the_variable(environ, field):
    with pytest.raises(InvalidField) as info:
        auth_from_environ(environ)
    assert info.value.field == field


@pytest.mark.parametrize("text, bind", [
    ("127.0.0.1:8080", Bind("127.0.0.1", 8080)),
    ("[::1]:9000", Bind("::1", 9000)),
    ("localhost:0", Bind("localhost", 0)),
])
def test_parse_bind(text, bind):
    assert parse_bind(text) == bind


@pytest.mark.parametrize("text", ["8080", ":8080", "host:", "host:port", "h:70000"])
def test_parse_bind_rejects(text):
    with pytest.raises(InvalidField) as info:
        parse_bind(text)
    assert info.value.field == "bind"


def test_loopback_addresses():
    assert is_loopback("127.0.0.1") and is_loopback("127.8.9.10") and is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::")
    assert not is_loopback("192.168.1.20") and not is_loopback("10.0.0.1")
    assert not is_loopback("no-such-host.invalid")


def test_non_loopback_bind_needs_authentication():
    check_bind(Bind("127.0.0.1", 8080), None)
    check_bind(Bind("0.0.0.0", 8080), TokenAuth(TOKEN))
    with pytest.raises(InvalidField) as info:
        check_bind(Bind("0.0.0.0", 8080), None)
    assert info.value.field == "bind" and "CARAVEL_DASHBOARD_TOKEN" in str(info.value)
