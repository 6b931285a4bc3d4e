"""The Schedules page over a QueueScheduler, on every database."""
from __future__ import annotations

from datetime import timedelta

from tests.web.conftest import AUTH, TOKEN
from tests.web.html import parse
from tests.web.seed import EVIL_TENANT, Mail


def test_schedules_page_lists_each_schedule_and_its_next_run(admin, seeded):
    from werkzeug.test import Client

    from caravel_lite import QueueScheduler
    from caravel_lite.web import TokenAuth, wsgi_app

    scheduler = QueueScheduler(seeded.queue)
    scheduler.every("digest.hourly", timedelta(hours=1), Mail(1), queue="emails",
                    tenant_id=EVIL_TENANT)
    scheduler.cron("report.nightly", "0 2 * * *", Mail(2), queue="reports",
                   tenant_id="tenant-b", timezone="Europe/Berlin")
    assert scheduler.run_once() >= 1
    client = Client(wsgi_app(admin, clock=seeded.clock, auth=TokenAuth(TOKEN),
                             scheduler=scheduler))
    response = client.get("/schedules", headers=AUTH)
    assert response.status_code == 200
    assert EVIL_TENANT.encode() not in response.data
    page = parse(response.data)
    rows = {row.attrs["data-schedule"]: [c.text() for c in row.find_all("td")]
            for row in page.find_all("tr") if "data-schedule" in row.attrs}
    assert set(rows) == {"digest.hourly", "report.nightly"}
    hourly = rows["digest.hourly"]
    assert hourly[2] == "emails" and hourly[3] == EVIL_TENANT
    # The next hour after the seed's clock: today, so the time alone.
    assert hourly[6].startswith("10:00:00 UTC") and hourly[6].endswith(" in 35 min")
    nightly = rows["report.nightly"]
    assert "Europe/Berlin" in nightly[1]
    assert nightly[6].startswith("2030-01-02 01:00:00 UTC 02:00:00 CET local in ")
    links = [a.attrs["href"] for a in page.find_all("a") if "/jobs/" in a.attrs.get("href", "")]
    assert links and client.get(links[0], headers=AUTH).status_code == 200
    # The navigation shows the page only when a scheduler is given.
    assert b'href="/schedules"' in client.get("/", headers=AUTH).data
    without = Client(wsgi_app(admin, clock=seeded.clock, auth=TokenAuth(TOKEN)))
    assert b'href="/schedules"' not in without.get("/", headers=AUTH).data
    assert without.get("/schedules", headers=AUTH).status_code == 404
