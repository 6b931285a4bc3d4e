"""Fixtures for the dashboard tests: a seeded database on each backend and WSGI test
clients over it (werkzeug's, the usual client for any WSGI application)."""
from __future__ import annotations

import base64
from typing import Callable, Dict, Optional

import pytest

from werkzeug.datastructures import MultiDict
from werkzeug.test import Client, TestResponse

from caravel_lite.web import TokenAuth, wsgi_app
from tests.web.html import Element, parse
from tests.web.seed import Seeded, seed

TOKEN = "dashboard-test-token-0123"
AUTH = {"Authorization": "Basic " + base64.b64encode(f"ops:{TOKEN}".encode()).decode()}


class Browser:
    """A test client that sends the credentials and reads pages, from ``peer`` (the
    REMOTE_ADDR every server sets; werkzeug's client sets none)."""

    def __init__(self, client: Client, headers: Optional[Dict[str, str]],
                 peer: str = "127.0.0.1") -> None:
        self.client = client
        self.headers = dict(headers or {})
        self.peer = peer

    def get(self, path: str, **kwargs) -> TestResponse:
        return self.client.get(path, headers={**self.headers, **kwargs.pop("headers", {})},
                               environ_base={"REMOTE_ADDR": self.peer}, **kwargs)

    def post(self, path: str, data, **kwargs) -> TestResponse:
        return self.client.post(path, data=data,
                                headers={**self.headers, **kwargs.pop("headers", {})},
                                environ_base={"REMOTE_ADDR": self.peer}, **kwargs)

    def page(self, path: str) -> Element:
        response = self.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text)
        return parse(response.data)

    def submit(self, form: Element, extra=()) -> TestResponse:
        """Submit ``form`` as the browser would (its fields plus ``extra``)."""
        assert form.attrs["method"] == "post"
        return self.post(form.attrs["action"],
                         data=MultiDict(list(form.fields()) + list(extra)))


@pytest.fixture
def seeded(db) -> Seeded:
    return seed(db)


@pytest.fixture
def admin(db, seeded):
    from caravel_lite import QueueAdmin
    return QueueAdmin(db, clock=seeded.clock)


@pytest.fixture
def browser(admin, seeded) -> Callable[..., Browser]:
    """``browser(**wsgi_app options)``: a client over a dashboard on the seeded
    database, with token authentication unless ``auth=None`` is given (with
    ``insecure_no_auth=True``: a dashboard needs one or the other)."""
    def make(headers: Optional[Dict[str, str]] = AUTH, **options) -> Browser:
        options.setdefault("auth", TokenAuth(TOKEN))
        app = wsgi_app(admin, clock=seeded.clock, **options)
        return Browser(Client(app), headers)
    return make
