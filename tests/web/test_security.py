"""The dashboard's security on every database: authentication, CSRF, read-only,
actions only with authentication, escaping of every value from the database."""
from __future__ import annotations

import base64

from caravel_lite.values import JobState
from tests.web.conftest import TOKEN
from tests.web.seed import EVIL_TENANT

RAW = EVIL_TENANT.encode()
ESCAPED = b"&lt;script&gt;alert(1)&lt;/script&gt;"


def replay_form_fields(client, job_id):
    form = client.page(f"/jobs/{job_id}").find("form", action="/actions/replay")
    return dict(form.fields())


def unchanged(admin, job_id):
    return JobState(admin.job(job_id).state) is JobState.DEAD_LETTER


def test_every_page_needs_the_credentials_when_auth_is_configured(browser, seeded):
    anonymous = browser(headers=None)
    for path in ("/", "/jobs", "/dead-letters", f"/jobs/{seeded.ids['dead'][0]}",
                 "/static/dashboard.css"):
        response = anonymous.get(path)
        assert response.status_code == 401, path
        assert response.headers["WWW-Authenticate"].startswith("Basic ")
    wrong = base64.b64encode(b"ops:not-the-token-at-all").decode()
    assert browser(headers={"Authorization": f"Basic {wrong}"}).get("/").status_code == 401
    assert browser(headers={"Authorization": f"Bearer {TOKEN}"}).get("/").status_code == 200


def test_a_post_without_credentials_is_refused(browser, admin, seeded):
    job_id = seeded.ids["dead"][0]
    fields = replay_form_fields(browser(), job_id)
    response = browser(headers=None).post("/actions/replay", data={**fields, "confirmed": "1"})
    assert response.status_code == 401 and unchanged(admin, job_id)


def test_csrf_token_is_required_and_bound_to_the_cookie(browser, admin, seeded):
    job_id = seeded.ids["dead"][0]
    client = browser()
    fields = replay_form_fields(client, job_id)
    without = {k: v for k, v in fields.items() if k != "csrf"}
    assert client.post("/actions/replay", data={**without, "confirmed": "1"}).status_code == 403
    forged = {**fields, "csrf": "0" * 64, "confirmed": "1"}
    assert client.post("/actions/replay", data=forged).status_code == 403
    # A token is worthless with another browser's cookie.
    other = browser()
    other.page("/")
    assert other.post("/actions/replay", data={**fields, "confirmed": "1"}).status_code == 403
    # A request the browser marks cross-site is refused even with a valid token.
    response = client.post("/actions/replay", data={**fields, "confirmed": "1"},
                           headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    # A GET never acts.
    assert client.get(f"/actions/replay?job_id={job_id}&confirmed=1").status_code == 405
    assert unchanged(admin, job_id)
    # The genuine form still works.
    assert client.post("/actions/replay", data={**fields, "confirmed": "1"}).status_code == 303
    assert JobState(admin.job(job_id).state) is JobState.PENDING


def test_csrf_cookie_is_httponly_and_samesite_strict(browser):
    response = browser().get("/")
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("caravel_csrf=") and "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie


def test_read_only_removes_and_refuses_every_action(browser, admin, seeded):
    job_id = seeded.ids["dead"][0]
    fields = replay_form_fields(browser(), job_id)
    client = browser(read_only=True)
    for path in ("/", "/jobs", "/dead-letters", f"/jobs/{job_id}",
                 f"/jobs/{seeded.ids['pending'][0]}", "/jobs?state=pending"):
        body = client.get(path).data
        assert b"/actions/" not in body, path
    client.get("/")
    for action in ("replay", "discard", "delete"):
        response = client.post(f"/actions/{action}", data={**fields, "confirmed": "1"})
        assert response.status_code == 403 and b"read-only" in response.data
    assert unchanged(admin, job_id)


def test_without_authentication_the_dashboard_only_shows(browser, admin, seeded):
    client = browser(auth=None, insecure_no_auth=True, headers=None)
    job_id = seeded.ids["dead"][0]
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200 and b"/actions/" not in page.data
    response = client.post("/actions/replay", data={"job_id": str(job_id), "confirmed": "1"})
    assert response.status_code == 403 and b"CARAVEL_DASHBOARD_TOKEN" in response.data
    assert unchanged(admin, job_id)


def test_database_text_is_escaped_everywhere(browser, seeded):
    client = browser()
    evil_dead = seeded.ids["dead"][0]
    for path in ("/jobs", "/dead-letters", f"/jobs/{evil_dead}",
                 "/jobs?tenant=%3Cscript%3Ealert(1)%3C%2Fscript%3E"):
        body = client.get(path).data
        assert RAW not in body, path
        assert ESCAPED in body, path
    # The filter value is reflected into the form escaped, attribute quotes included.
    body = client.get('/jobs?queue=%22%3E%3Cscript%3Ex%3C%2Fscript%3E').data
    assert b'"><script>x' not in body and b"&#34;&gt;&lt;script&gt;x" in body


def test_pages_forbid_inline_scripts_and_framing(browser):
    response = browser().get("/")
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert response.headers["X-Frame-Options"] == "DENY"
    assert b"<script>" not in response.data  # only <script src=...>


def test_without_authentication_only_loopback_host_names_are_answered(browser):
    """Another site's name resolved to 127.0.0.1 (DNS rebinding) must not read the
    pages of a dashboard that has no authentication."""
    client = browser(auth=None, insecure_no_auth=True, headers=None)
    for host in ("127.0.0.1:8080", "localhost:8080", "[::1]:8080", "127.0.0.2"):
        assert client.get("/", headers={"Host": host}).status_code == 200, host
    for host in ("evil.example", "evil.example:8080", "127.0.0.1.evil.example", "10.0.0.5"):
        response = client.get("/", headers={"Host": host})
        assert response.status_code == 403 and b"loopback" in response.data, host
    # With authentication the host name is the application's business.
    assert browser().get("/", headers={"Host": "dashboard.example"}).status_code == 200
