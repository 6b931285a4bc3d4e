"""Replay, discard and delete through the dashboard's forms, one job or a filter, on
every database: a confirmation that says how many, then the change."""
from __future__ import annotations

from caravel_lite.values import JobState
from tests.web.html import parse
from tests.web.seed import EVIL_TENANT


def state_of(admin, job_id):
    detail = admin.job(job_id)
    return None if detail is None else JobState(detail.state)


def confirm(client, response):
    """The confirmation page's count and the response to pressing its button."""
    assert response.status_code == 200, response.text
    page = parse(response.data)
    count = int(page.find("p", class_="count").attrs["data-count"])
    form = page.find("form", class_="confirm")
    return count, client.submit(form)


def test_replay_one_dead_letter_from_its_page(browser, admin, seeded):
    client = browser()
    job_id = seeded.ids["dead"][0]
    form = client.page(f"/jobs/{job_id}").find("form", action="/actions/replay")
    count, done = confirm(client, client.submit(form))
    assert count == 1
    assert state_of(admin, job_id) is JobState.PENDING
    assert done.status_code == 303 and done.headers["Location"].startswith(f"/jobs/{job_id}")
    page = client.page(done.headers["Location"])
    assert page.find("p", class_="notice").text() == "Replayed 1 job."


def test_the_first_post_changes_nothing(browser, admin, seeded):
    client = browser()
    job_id = seeded.ids["dead"][0]
    form = client.page(f"/jobs/{job_id}").find("form", action="/actions/replay")
    assert client.submit(form).status_code == 200
    assert state_of(admin, job_id) is JobState.DEAD_LETTER


def test_discard_one_pending_job(browser, admin, seeded):
    client = browser()
    job_id = seeded.ids["pending"][0]
    form = client.page(f"/jobs/{job_id}").find("form", action="/actions/discard")
    count, done = confirm(client, client.submit(form))
    assert count == 1 and done.status_code == 303
    detail = admin.job(job_id)
    assert JobState(detail.state) is JobState.DEAD_LETTER
    assert str(getattr(detail.last_failure, "value", detail.last_failure)) == "discarded"


def test_delete_one_job_and_no_delete_button_while_leased(browser, admin, seeded):
    client = browser()
    job_id = seeded.ids["completed"][0]
    form = client.page(f"/jobs/{job_id}").find("form", action="/actions/delete")
    count, done = confirm(client, client.submit(form))
    assert count == 1 and done.headers["Location"].startswith("/jobs?")
    assert admin.job(job_id) is None
    leased = client.page(f"/jobs/{seeded.ids['leased'][0]}")
    assert leased.find_all("form", action="/actions/delete") == []


def test_replay_all_matching_dead_letters_says_how_many(browser, admin, seeded):
    client = browser()
    page = client.page("/dead-letters?queue=emails")
    form = [f for f in page.find_all("form", action="/actions/replay")
            if f.find_all("input", name="scope")][0]
    count, done = confirm(client, client.submit(form))
    assert count == 1  # only the emails dead letter
    assert state_of(admin, seeded.ids["dead"][0]) is JobState.PENDING
    assert state_of(admin, seeded.ids["dead"][1]) is JobState.DEAD_LETTER
    assert "count=1" in done.headers["Location"]


def test_replay_all_dead_letters_without_a_filter(browser, admin, seeded):
    client = browser()
    page = client.page("/dead-letters")
    form = [f for f in page.find_all("form", action="/actions/replay")
            if f.find_all("input", name="scope")][0]
    count, _ = confirm(client, client.submit(form))
    assert count == 2
    assert all(state_of(admin, job_id) is JobState.PENDING for job_id in seeded.ids["dead"])


def test_delete_all_matching_dead_letters_touches_nothing_else(browser, admin, seeded):
    client = browser()
    page = client.page("/dead-letters?queue=reports")
    form = [f for f in page.find_all("form", action="/actions/delete")
            if f.find_all("input", name="scope")][0]
    count, _ = confirm(client, client.submit(form))
    assert count == 1
    assert admin.job(seeded.ids["dead"][1]) is None
    assert admin.job(seeded.ids["dead"][0]) is not None
    assert all(admin.job(job_id) is not None for job_id in seeded.ids["pending"])


def test_discard_all_matching_pending_jobs(browser, admin, seeded):
    client = browser()
    page = client.page(f"/jobs?state=pending&queue=reports&tenant={EVIL_TENANT}")
    form = page.find("form", class_="bulk")
    count, _ = confirm(client, client.submit(form))
    assert count == 2
    evil = [job_id for job_id in seeded.ids["pending"]
            if admin.job(job_id).tenant_id == EVIL_TENANT]
    others = [job_id for job_id in seeded.ids["pending"] if job_id not in evil]
    assert len(evil) == 2
    assert all(state_of(admin, job_id) is JobState.DEAD_LETTER for job_id in evil)
    assert all(state_of(admin, job_id) is JobState.PENDING for job_id in others)
    assert state_of(admin, seeded.ids["delayed"][0]) is JobState.PENDING


def test_delete_from_a_job_page_keeps_a_job_replayed_meanwhile(browser, admin, seeded):
    """An operator opens a dead letter's page and presses Delete; another operator
    replays it before the confirmation: the delete checks the state it was shown in
    and keeps the job, now pending."""
    client = browser()
    job_id = seeded.ids["dead"][0]
    form = client.page(f"/jobs/{job_id}").find("form", action="/actions/delete")
    confirmation = client.submit(form)
    assert admin.replay(job_id)
    count, done = confirm(client, confirmation)
    assert count == 1 and done.status_code == 303 and "count=0" in done.headers["Location"]
    assert state_of(admin, job_id) is JobState.PENDING
