"""What the job lists show an operator, through the test client on every database:
ids that tell jobs apart, since when a leased job runs, when a job finished, the
exception type of a dead letter, the job type named "Wire name" as on the command line
(``--wire-name``)."""
from __future__ import annotations

import re
from datetime import timedelta, timezone
from typing import Dict, List

from tests.web.html import Element
from tests.web.seed import Mail

TIME = re.compile(r"\d\d:\d\d:\d\d\Z")


def table_rows(page: Element) -> Dict[str, Dict[str, Element]]:
    """job id -> {column header: cell} of the page's job table."""
    table = page.find("table", class_="jobs")
    headers = [th.text() for th in table.find("thead").find_all("th")]
    rows = {}
    for row in table.find("tbody").find_all("tr"):
        rows[row.attrs["data-job-id"]] = dict(zip(headers, row.find_all("td")))
    return rows


def shown(instant) -> str:
    """As a list shows an instant of the current day (the seed's clock): its time."""
    return instant.astimezone(timezone.utc).strftime("%H:%M:%S")


def test_ids_are_shown_whole_and_tell_jobs_apart(browser, seeded):
    """The seed's jobs were all made within a second, so every one of them has the same
    first 8 characters (those of 65 seconds): the list shows each id whole."""
    page = browser().page("/jobs")
    rows = table_rows(page)
    texts: List[str] = [cells["Job"].text() for cells in rows.values()]
    assert texts == list(rows)  # the whole id, as the link's target has it
    assert len(set(texts)) == len(texts) == len(seeded.all_ids())
    # A shared time prefix. Not of 13 characters (one millisecond): on a loaded
    # machine each of the seed's jobs may be made in a millisecond of its own.
    assert len({text[:8] for text in texts}) < len(texts)
    for job_id, cells in rows.items():
        assert cells["Job"].find("a").attrs["href"] == f"/jobs/{job_id}"
        assert cells["Job"].find("code", class_="job-id").text() == job_id


def test_a_leased_job_shows_since_when_it_runs(browser, seeded, admin):
    leased = str(seeded.ids["leased"][0])
    cells = table_rows(browser().page("/jobs?state=leased"))[leased]
    claimed = admin.job(leased).claimed_at
    assert cells["State"].text() == "leased running for 5 s"  # the seed's clock moved 5 s
    assert cells["Started (UTC)"].text() == shown(claimed)
    assert cells["Started (UTC)"].find("time").attrs["datetime"].startswith(
        claimed.strftime("%Y-%m-%dT%H:%M:%S"))
    job_page = browser().page(f"/jobs/{leased}")
    fields = dict(zip([dt.text() for dt in job_page.find_all("dt")],
                      [dd.text() for dd in job_page.find_all("dd")]))
    assert fields["Last claimed"] == claimed.strftime("%Y-%m-%d %H:%M:%S UTC (running for 5 s)")


def test_the_list_shows_when_each_job_finished(browser, seeded, admin):
    """The time of day for today, the date too for another day."""
    rows = table_rows(browser().page("/jobs"))
    for job_id in seeded.ids["completed"] + seeded.ids["dead"]:
        finished = admin.job(job_id).finished_at
        assert rows[str(job_id)]["Finished (UTC)"].text() == shown(finished)
        assert TIME.match(rows[str(job_id)]["Enqueued (UTC)"].text())
        title = rows[str(job_id)]["Finished (UTC)"].find("time").attrs["title"]
        assert title.startswith(finished.strftime("%Y-%m-%d %H:%M:%S UTC, "))
    for job_id in seeded.ids["pending"] + seeded.ids["leased"]:
        assert rows[str(job_id)]["Finished (UTC)"].text() == "—"
    seeded.clock.advance(timedelta(days=1))
    rows = table_rows(browser().page("/jobs"))
    finished = admin.job(seeded.ids["completed"][0]).finished_at
    # Another day: the month and day too (the whole date in another year), so that a
    # list after midnight is no wider than during the day.
    shape = ("%m-%d %H:%M:%S" if finished.year == seeded.clock().year
             else "%Y-%m-%d %H:%M:%S")
    assert rows[str(seeded.ids["completed"][0])]["Finished (UTC)"].text() == \
        finished.strftime(shape)


def test_dead_letters_show_the_exception_type(browser, seeded, db):
    rows = table_rows(browser().page("/dead-letters"))
    assert set(rows) == {str(job_id) for job_id in seeded.ids["dead"]}
    for cells in rows.values():
        assert cells["Last failure"].text().startswith("handler_failed")
        assert cells["Last failure"].find("code", class_="error-type").text() \
            == "tests.web.seed.MailRejected"
    # A failure that raised nothing (a lease that expired) names no exception, not the
    # type of an older failure.
    from caravel_lite import DatabaseQueue, Dispatch, Failure, QueueOptions
    from tests.web.seed import registry
    queue = DatabaseQueue(db, registry, QueueOptions(max_attempts=2), clock=seeded.clock)
    job_id = queue.enqueue(Mail(50), Dispatch(queue="other", tenant_id="t")).job_id
    assert queue.fail(queue.claim("other"), Failure.HANDLER_FAILED, error=KeyError("x"))
    seeded.clock.advance(timedelta(minutes=5))
    assert queue.fail(queue.claim("other"), Failure.LEASE_EXPIRED)
    cells = table_rows(browser().page("/dead-letters?queue=other"))[str(job_id)]
    assert cells["Last failure"].text() == "lease_expired"


def test_the_job_type_is_called_wire_name_everywhere(browser, seeded):
    client = browser()
    page = client.page("/jobs")
    headers = [th.text() for th in page.find("table", class_="jobs").find_all("th")]
    assert "Wire name" in headers and "Type" not in headers
    label = [lab for lab in page.find("form", class_="filters").find_all("label")
             if lab.find_all("input", name="wire_name")]
    assert [lab.text() for lab in label] == ["Wire name"]
    filtered = table_rows(client.page("/jobs?wire_name=mail.send.v1&state=dead_letter"))
    assert set(filtered) == {str(job_id) for job_id in seeded.ids["dead"]}
    none = client.page("/jobs?wire_name=other.v1")
    assert none.find("p", class_="empty").text() == "No job matches."
    dts = [dt.text() for dt in client.page(f"/jobs/{seeded.ids['dead'][0]}").find_all("dt")]
    assert "Wire name" in dts and "Type" not in dts
