"""Each page of the dashboard on every database, through the WSGI test client: the
figures match the seeded queue, filters and keyset pagination match QueueAdmin."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import List

from caravel_lite.admin.filters import id_time_ms

from tests.web.html import Element
from tests.web.seed import EVIL_TENANT, TENANT


def row_ids(page: Element) -> List[uuid.UUID]:
    return [uuid.UUID(row.attrs["data-job-id"]) for row in page.find_all("tr")
            if "data-job-id" in row.attrs]


def queue_row(page: Element, queue_name: str) -> List[str]:
    row = page.find("tr", data_queue=queue_name)
    return [cell.text() for cell in row.find_all("td")]


def test_overview_counts_every_queue(browser, seeded):
    page = browser().page("/")
    # Queue, ready, delayed, leased, expired, dead letters, completed and failed
    # attempts in the last hour, oldest ready.
    assert queue_row(page, "emails")[:8] == ["emails", "0", "1", "0", "0", "1", "3", "3"]
    assert queue_row(page, "reports")[:8] == ["reports", "4", "0", "0", "0", "1", "0", "3"]
    assert queue_row(page, "leases")[:8] == ["leases", "0", "0", "1", "0", "0", "0", "0"]
    figures = page.find("section", class_="figures").text()
    assert "pickup latency p50" in figures and "oldest ready job" in figures
    # The charts are inline SVG with one group per bucket; the totals are text.
    charts = page.find_all("svg", class_="chart")
    assert len(charts) == 2
    assert len(charts[0].find_all("g")) == 60 and len(charts[1].find_all("g")) == 48
    caption = page.find_all("figcaption")[1].text()
    assert "3 completed" in caption and "6 failed" in caption  # 2 jobs, 3 attempts each


def test_overview_refreshes_itself_from_a_partial_page(browser):
    client = browser()
    full = client.get("/")
    assert b'data-refresh="5"' in full.data and b"/static/dashboard.js" in full.data
    partial = client.get("/", headers={"X-Caravel-Partial": "1"})
    assert partial.status_code == 200
    assert b"<html" not in partial.data and b'data-queue="emails"' in partial.data


def test_static_assets_ship_with_the_package(browser):
    client = browser()
    for name, kind in (("dashboard.css", "text/css"), ("dashboard.js", "text/javascript"),
                       ("favicon.svg", "image/svg+xml")):
        response = client.get(f"/static/{name}")
        assert response.status_code == 200 and response.content_type.startswith(kind)
    assert client.get("/static/../app.py").status_code == 404
    assert client.get("/static/nothing.css").status_code == 404


def test_jobs_page_lists_every_job_newest_first(browser, seeded, admin):
    page = browser().page("/jobs")
    expected = [job.job_id for job in admin.jobs(limit=50).jobs]
    assert row_ids(page) == expected
    assert set(row_ids(page)) == set(seeded.all_ids())


def test_jobs_filters_match_the_admin(browser, seeded, admin):
    client = browser()
    cases = [("queue=reports", {"queue": "reports"}),
             ("state=dead_letter", {"state": "dead_letter"}),
             ("tenant=tenant-b", {"tenant_id": TENANT}),
             ("queue=reports&state=pending", {"queue": "reports", "state": "pending"}),
             ("wire_name=mail.send.v1&failure=handler_failed",
              {"wire_name": "mail.send.v1", "failure": "handler_failed"})]
    for query, kwargs in cases:
        from caravel_lite.values import Failure, JobState
        typed = dict(kwargs)
        if "state" in typed:
            typed["state"] = JobState(typed["state"])
        if "failure" in typed:
            typed["failure"] = Failure(typed["failure"])
        shown = row_ids(client.page(f"/jobs?{query}"))
        assert shown == [job.job_id for job in admin.jobs(limit=50, **typed).jobs], query
        assert shown, query
    assert set(row_ids(client.page("/jobs?queue=reports&state=pending"))) == set(
        seeded.ids["pending"])
    assert set(row_ids(client.page("/jobs?state=dead_letter"))) == set(seeded.ids["dead"])
    # A time range on creation time, which the ids carry (the process's wall clock, not
    # the test clock; read from the ids themselves, since an earlier test in the same
    # process may have frozen the wall clock in the future and ids never go back in
    # time): everything since an hour before, nothing a day after, nothing until an
    # hour before.
    created = sorted(id_time_ms(str(job_id)) for job_id in seeded.all_ids())
    first = datetime.fromtimestamp(created[0] / 1000, timezone.utc)
    last = datetime.fromtimestamp(created[-1] / 1000, timezone.utc)
    hour_ago = (first - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%MZ")
    tomorrow = (last + timedelta(days=1)).strftime("%Y-%m-%dT%H:%MZ")
    assert set(row_ids(client.page(f"/jobs?since={hour_ago}"))) == set(seeded.all_ids())
    assert row_ids(client.page(f"/jobs?since={tomorrow}")) == []
    assert row_ids(client.page(f"/jobs?until={hour_ago}")) == []


def test_a_bad_filter_is_a_400_naming_the_field_with_the_form_kept(browser):
    response = browser().get("/jobs?state=finished&queue=emails")
    assert response.status_code == 400
    assert b"state: must be one of" in response.data
    assert b'name="queue" value="emails"' in response.data


def test_keyset_pagination_walks_every_job_once(browser, seeded):
    client = browser(page_size=3)
    seen: List[uuid.UUID] = []
    path = "/jobs"
    pages = 0
    while path:
        page = client.page(path)
        ids = row_ids(page)
        assert 0 < len(ids) <= 3
        seen.extend(ids)
        pages += 1
        older = page.find_all("a", class_="next-page")
        path = older[0].attrs["href"] if older else None
    assert pages == 4  # 11 jobs, 3 per page
    assert len(seen) == len(set(seen)) == len(seeded.all_ids())
    assert set(seen) == set(seeded.all_ids())


def test_dead_letters_page_shows_only_dead_letters(browser, seeded):
    page = browser().page("/dead-letters")
    assert set(row_ids(page)) == set(seeded.ids["dead"])
    page = browser().page("/dead-letters?queue=reports&state=pending")  # state is forced
    assert row_ids(page) == [seeded.ids["dead"][1]]


def test_job_page_shows_the_envelope_and_failure_history(browser, seeded):
    job_id = seeded.ids["dead"][0]
    page = browser().page(f"/jobs/{job_id}")
    envelope = page.find("dl", class_="envelope")
    fields = dict(zip([dt.text() for dt in envelope.find_all("dt")],
                      [dd.text() for dd in envelope.find_all("dd")]))
    assert fields["Queue"] == "emails" and fields["Tenant"] == EVIL_TENANT
    assert fields["State"] == "dead_letter" and fields["Attempts"] == "3 of 3"
    assert fields["Last failure"] == "handler_failed: tests.web.seed.MailRejected"
    assert fields["Lease renewals"] == "0"
    assert fields["Enqueued"] == "2030-01-01 09:00:00 UTC"
    assert fields["Last claimed"] == "2030-01-01 09:16:00 UTC"  # the third attempt
    assert fields["Finished"] == "2030-01-01 09:16:00 UTC"
    rows = page.find("table", class_="failures").find("tbody").find_all("tr")
    assert len(rows) == 3
    cells = [[cell.text() for cell in row.find_all("td")] for row in rows]
    # When, attempt, replays before it, category, exception type, site, description.
    assert [row[1] for row in cells] == ["1", "2", "3"]
    assert all(row[2] == "0" and row[3] == "handler_failed" for row in cells)
    assert all(row[4] == "tests.web.seed.MailRejected" for row in cells)
    assert all(row[5].startswith("tests.web.seed:send_mail:") for row in cells)
    # No exception message is ever stored, so none can be shown.
    assert b"recipient refused" not in browser().get(f"/jobs/{job_id}").data


def test_payload_only_with_show_payloads(browser, seeded):
    job_id = seeded.ids["dead"][0]
    hidden = browser().get(f"/jobs/{job_id}")
    assert b"--show-payloads" in hidden.data and b"bold" not in hidden.data
    shown = browser(show_payloads=True).get(f"/jobs/{job_id}")
    assert shown.status_code == 200
    payload = shown.data.split(b'<pre class="payload">')[1].split(b"</pre>")[0]
    assert b"&lt;b&gt;bold&lt;/b&gt;" in payload and b"<b>" not in payload
    # Listings never carry payloads, even with the switch on.
    assert b"bold" not in browser(show_payloads=True).get("/jobs").data


def test_unknown_job_and_route(browser):
    client = browser()
    assert client.get(f"/jobs/{uuid.uuid4()}").status_code == 404
    assert client.get("/jobs/not-a-uuid").status_code == 404
    assert client.get("/nowhere").status_code == 404
    response = client.post("/jobs", data={})
    assert response.status_code == 405 and response.headers["Allow"] == "GET"


class CountingAdmin:
    """The real admin, with a record of each ``stats`` call's window."""

    def __init__(self, admin) -> None:
        self._admin = admin
        self.windows: List[object] = []

    def stats(self, **kwargs):
        self.windows.append(kwargs["since"])
        return self._admin.stats(**kwargs)

    def __getattr__(self, name):
        return getattr(self._admin, name)


def test_each_overview_reads_one_hour_after_warm(admin, seeded):
    from caravel_lite.web import TokenAuth, wsgi_app
    from tests.web.conftest import AUTH, TOKEN, Browser
    from werkzeug.test import Client

    counting = CountingAdmin(admin)
    app = wsgi_app(counting, clock=seeded.clock, auth=TokenAuth(TOKEN))
    app.warm()
    now = seeded.clock()
    assert len(counting.windows) == 2  # the hour, then the rest of the day, once
    assert counting.windows[1] <= now - timedelta(hours=23, minutes=59)
    client = Browser(Client(app), AUTH)
    for _ in range(3):
        client.page("/")
        seeded.clock.advance(timedelta(seconds=5))
    assert len(counting.windows) == 5
    assert all(now - timedelta(minutes=62) < since <= now for since in counting.windows[2:])
    # What the day chart shows matches a dashboard that reads the whole day at once.
    fresh = Browser(Client(wsgi_app(admin, clock=seeded.clock, auth=TokenAuth(TOKEN))), AUTH)
    caption = [f.text() for f in client.page("/").find_all("figcaption")]
    assert caption == [f.text() for f in fresh.page("/").find_all("figcaption")]
