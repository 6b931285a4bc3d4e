"""The dashboard's incident controls through its test client, on every database:
cancel (one job, and every matching job after a count confirmation), pause and resume
from the overview, the Workers page, and a job's progress and recorded errors."""
from __future__ import annotations

from caravel_lite.heartbeats import Heartbeats
from caravel_lite.values import JobState
from tests.web.test_actions import confirm, state_of


def test_cancel_a_pending_and_a_leased_job_from_their_pages(browser, admin, seeded):
    client = browser()
    pending = seeded.ids["pending"][0]
    leased = seeded.ids["leased"][0]
    for job_id in (pending, leased):
        form = client.page(f"/jobs/{job_id}").find("form", action="/actions/cancel")
        count, done = confirm(client, client.submit(form))
        assert count == 1 and done.status_code == 303
        page = client.page(done.headers["Location"])
        assert page.find("p", class_="notice").text().startswith("Cancelled 1 job")
    assert state_of(admin, pending) is JobState.CANCELLED
    assert state_of(admin, leased) is JobState.LEASED  # asked: its worker ends it
    page = client.page(f"/jobs/{leased}")
    assert not page.find_all("form", action="/actions/cancel")  # already requested
    assert "Cancel requested" in page.text()
    # a cancelled job can be replayed from its page
    assert client.page(f"/jobs/{pending}").find_all("form", action="/actions/replay")


def test_cancel_every_matching_pending_job_after_the_count(browser, admin, seeded):
    client = browser()
    listing = client.page("/jobs?queue=reports&state=pending")
    form = listing.find("form", action="/actions/cancel")
    count, done = confirm(client, client.submit(form))
    assert count == len(seeded.ids["pending"]) and done.status_code == 303
    assert {state_of(admin, j) for j in seeded.ids["pending"]} == {JobState.CANCELLED}
    assert state_of(admin, seeded.ids["delayed"][0]) is JobState.PENDING  # other queue


def test_pause_and_resume_a_queue_from_the_overview(browser, admin, seeded):
    client = browser()
    row = client.page("/").find("tr", **{"data-queue": "reports"})
    done = client.submit(row.find("form", action="/actions/pause"))
    assert done.status_code == 303 and admin.paused() == {"reports"}
    page = client.page(done.headers["Location"])
    assert page.find("p", class_="notice").text().startswith("Queue paused")
    row = page.find("tr", **{"data-queue": "reports"})
    assert "paused" in row.text()
    done = client.submit(row.find("form", action="/actions/resume"))
    assert done.status_code == 303 and admin.paused() == set()


def test_a_read_only_dashboard_offers_no_controls(browser, admin, seeded):
    client = browser(read_only=True)
    assert not client.page("/").find_all("form", action="/actions/pause")
    job = seeded.ids["pending"][0]
    assert not client.page(f"/jobs/{job}").find_all("form", action="/actions/cancel")


def test_the_workers_page_lists_each_worker_and_its_jobs(browser, db, seeded):
    client = browser()
    assert "No worker is running" in client.page("/workers").text()
    now_ms = int(seeded.clock().timestamp() * 1000)
    Heartbeats(db).register("0123456789abcdef", ["leases"], 2, now_ms)
    page = client.page("/workers")
    row = page.find("tr", **{"data-worker": "0123456789abcdef"})
    assert "leases" in row.text() and "alive" in row.text()
