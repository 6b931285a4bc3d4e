"""A mounted dashboard and a client on another machine, on every database: the request
comes from a non-loopback address (REMOTE_ADDR, set through werkzeug's test client for
WSGI and Starlette's for ASGI) and sends ``Host: localhost``. Without authentication
such a request used to be answered with every tenant's jobs; now a mounted dashboard
needs ``auth=`` unless the application says ``insecure_no_auth=True``, and even then
answers only loopback clients."""
from __future__ import annotations

import logging

import flask
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.test import Client

from caravel_lite import InvalidField
from caravel_lite.web import (Dashboard, DashboardSettings, TokenAuth, asgi_app,
                              auth_from_environ, mount, wsgi_app)
from tests.web.conftest import AUTH, TOKEN
from tests.web.seed import EVIL_TENANT

REMOTE = "203.0.113.7"  # TEST-NET-3: an address of another machine
LOCALHOST = {"Host": "localhost"}
ESCAPED_TENANT = b"&lt;script&gt;"


def flask_host(dashboard) -> Client:
    host = flask.Flask("host")

    @host.route("/")
    def home():
        return "the application"

    host.wsgi_app = DispatcherMiddleware(host.wsgi_app,  # type: ignore[method-assign]
                                         {"/ops/queue": dashboard})
    return Client(host)


def test_a_mounted_dashboard_needs_auth(admin, seeded):
    # What an application that forgot to set the variable gets: no dashboard at all.
    for make in (lambda: wsgi_app(admin, clock=seeded.clock),
                 lambda: wsgi_app(admin, auth=auth_from_environ({})),
                 lambda: asgi_app(admin),
                 lambda: Dashboard(admin),
                 lambda: Dashboard(admin, DashboardSettings(read_only=True))):
        with pytest.raises(InvalidField) as info:
            make()
        assert info.value.field == "auth"
        assert "insecure_no_auth=True" in str(info.value)
    with pytest.raises(InvalidField) as info:
        wsgi_app(admin, auth=TokenAuth(TOKEN), insecure_no_auth=True)
    assert info.value.field == "insecure_no_auth"


def test_a_remote_client_saying_host_localhost_reads_nothing_wsgi(admin, seeded, caplog):
    with caplog.at_level(logging.WARNING, logger="caravel_lite.web"):
        dashboard = wsgi_app(admin, clock=seeded.clock, insecure_no_auth=True)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "insecure_no_auth" in warnings[0].getMessage()
    client = flask_host(dashboard)
    for path in ("/ops/queue/", "/ops/queue/jobs", "/ops/queue/dead-letters",
                 f"/ops/queue/jobs/{seeded.ids['dead'][0]}", "/ops/queue/static/dashboard.css"):
        remote = client.get(path, headers=LOCALHOST, environ_base={"REMOTE_ADDR": REMOTE})
        assert remote.status_code == 403, path
        assert ESCAPED_TENANT not in remote.data and EVIL_TENANT.encode() not in remote.data
        local = client.get(path, headers=LOCALHOST, environ_base={"REMOTE_ADDR": "127.0.0.1"})
        assert local.status_code == 200, path
    # No address, or a name instead of one, proves nothing either.
    for peer in ("", "localhost"):
        assert client.get("/ops/queue/", headers=LOCALHOST,
                          environ_base={"REMOTE_ADDR": peer}).status_code == 403, peer
    assert client.get("/").text == "the application"


def test_a_remote_client_needs_the_credentials_with_auth(admin, seeded):
    client = Client(mount(lambda environ, start: [], "/ops/queue",
                          wsgi_app(admin, clock=seeded.clock, auth=TokenAuth(TOKEN))))
    anonymous = client.get("/ops/queue/jobs", headers=LOCALHOST,
                           environ_base={"REMOTE_ADDR": REMOTE})
    assert anonymous.status_code == 401 and ESCAPED_TENANT not in anonymous.data
    signed_in = client.get("/ops/queue/jobs", headers={**LOCALHOST, **AUTH},
                           environ_base={"REMOTE_ADDR": REMOTE})
    assert signed_in.status_code == 200 and ESCAPED_TENANT in signed_in.data


def test_a_remote_client_saying_host_localhost_reads_nothing_asgi(admin, seeded):
    app = Starlette(routes=[Mount("/ops", app=asgi_app(admin, clock=seeded.clock,
                                                       insecure_no_auth=True))])
    with TestClient(app, base_url="http://localhost", client=(REMOTE, 40000)) as remote:
        response = remote.get("/ops/jobs")
        assert response.status_code == 403 and ESCAPED_TENANT not in response.content
    with TestClient(app, base_url="http://localhost", client=("127.0.0.1", 40000)) as local:
        assert local.get("/ops/jobs").status_code == 200
    authed = Starlette(routes=[Mount("/ops", app=asgi_app(admin, clock=seeded.clock,
                                                          auth=TokenAuth(TOKEN)))])
    with TestClient(authed, base_url="http://localhost", client=(REMOTE, 40000)) as remote:
        assert remote.get("/ops/jobs").status_code == 401
        assert remote.get("/ops/jobs", headers=AUTH).status_code == 200
