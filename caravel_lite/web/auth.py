"""The dashboard's authentication and locality rules: they live in
:mod:`caravel_lite.access`, shared with the metrics endpoint; re-exported here where
the dashboard's users import them."""
from __future__ import annotations

from caravel_lite.access import (MIN_PASSWORD_LENGTH, MIN_TOKEN_LENGTH, PASSWORD_VARIABLE,
                                 REALM, TOKEN_VARIABLE, USER_VARIABLE, Authenticator, Bind,
                                 PasswordAuth, TokenAuth, auth_from_environ, check_bind,
                                 is_loopback, local_request, parse_bind)

__all__ = ["MIN_PASSWORD_LENGTH", "MIN_TOKEN_LENGTH", "PASSWORD_VARIABLE", "REALM",
           "TOKEN_VARIABLE", "USER_VARIABLE", "Authenticator", "Bind", "PasswordAuth",
           "TokenAuth", "auth_from_environ", "check_bind", "is_loopback", "local_request",
           "parse_bind"]
