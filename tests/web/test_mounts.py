"""The dashboard mounted under a prefix in the frameworks docs/how-to/operating.md
shows: Flask (WSGI) and Starlette/FastAPI (ASGI), on every database."""
from __future__ import annotations

import flask
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.test import Client

from caravel_lite.values import JobState
from caravel_lite.web import TokenAuth, asgi_app, mount, wsgi_app
from tests.web.conftest import AUTH, TOKEN
from tests.web.html import parse


def test_flask_mount_under_a_prefix(admin, seeded):
    host = flask.Flask("host")

    @host.route("/")
    def home():
        return "the application"

    host.wsgi_app = DispatcherMiddleware(host.wsgi_app, {  # type: ignore[method-assign]
        "/ops/queue": wsgi_app(admin, clock=seeded.clock, auth=TokenAuth(TOKEN))})
    client = Client(host)
    assert client.get("/").text == "the application"
    response = client.get("/ops/queue/jobs", headers=AUTH)
    assert response.status_code == 200
    page = parse(response.data)
    links = [a.attrs["href"] for a in page.find_all("a", class_="job-link")]
    assert links and all(link.startswith("/ops/queue/jobs/") for link in links)
    assert page.find("link", rel="stylesheet").attrs["href"] == "/ops/queue/static/dashboard.css"


def test_starlette_mount_serves_pages_and_actions(admin, seeded):
    app = Starlette(routes=[Mount("/ops", app=asgi_app(admin, clock=seeded.clock,
                                                       auth=TokenAuth(TOKEN)))])
    job_id = seeded.ids["dead"][0]
    with TestClient(app, headers=AUTH) as client:
        response = client.get(f"/ops/jobs/{job_id}")
        assert response.status_code == 200
        page = parse(response.content)
        form = page.find("form", action="/ops/actions/replay")
        fields = dict(form.fields())
        confirm_page = client.post("/ops/actions/replay", data=fields)
        assert confirm_page.status_code == 200
        confirm_form = parse(confirm_page.content).find("form", class_="confirm")
        done = client.post("/ops/actions/replay", data=dict(confirm_form.fields()),
                           follow_redirects=False)
        assert done.status_code == 303 and done.headers["location"].startswith("/ops/jobs/")
    assert JobState(admin.job(job_id).state) is JobState.PENDING


def test_mount_helper_under_a_plain_wsgi_app(admin, seeded):
    """What Django's wsgi.py does: the project's WSGI application outside, the
    dashboard under a prefix."""
    def project(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"project:" + environ["PATH_INFO"].encode()]

    client = Client(mount(project, "/ops/queue",
                          wsgi_app(admin, clock=seeded.clock, auth=TokenAuth(TOKEN))))
    assert client.get("/ops/queueish").text == "project:/ops/queueish"
    response = client.get("/ops/queue", headers=AUTH)
    assert response.status_code == 200
    assert b'href="/ops/queue/jobs"' in response.data
    job_id = seeded.ids["dead"][0]
    assert client.get(f"/ops/queue/jobs/{job_id}", headers=AUTH).status_code == 200
