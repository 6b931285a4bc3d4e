"""The dashboard in a real browser: headless Chromium against ``caravel-lite
dashboard`` serving a seeded SQLite database. Loads the overview (and sees it refresh
itself); reads the job lists as a person sees them (whole ids, since when a leased job
runs, finish times, a dead letter's exception type, "Wire name"; no word cut in two on
any list or on the Schedules page); filters the jobs, opens a dead letter's failure
history, replays it through the page and checks the database; saves screenshots (to
$CARAVEL_SCREENSHOT_DIR when set, which is how docs/dashboard-*.png are made)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from caravel_lite import (DatabaseQueue, Dispatch, QueueAdmin, QueueScheduler, migrate,
                          open_database)
from caravel_lite.heartbeats import Heartbeats
from caravel_lite.values import JobState
from tests.support import wait_for
from tests.web.browser import require_browser, start_chromium
from tests.web.schedules_app import add_schedules
from tests.web.seed import Mail, registry, seed

TOKEN = "browser-test-token-0123456"
REPO = Path(__file__).resolve().parents[2]
SHOTS = ("dashboard-overview.png", "dashboard-jobs.png", "dashboard-leased.png",
         "dashboard-dead-letters.png", "dashboard-schedules.png", "dashboard-job.png",
         "dashboard-confirm.png", "dashboard-workers.png")

# The words (a date, a time of day, or else a run of letters and digits) of the
# matched elements that the browser laid out over more than one line: a word cut in
# two. A long name may wrap at a space, a hyphen, a slash or the <wbr> after a dot,
# never inside a word; "2026-12-" above "01" is a cut date.
CUT_WORDS = """
const cut = [];
for (const cell of document.querySelectorAll(arguments[0])) {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const words = /\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d|[A-Za-z0-9_]+/g;
    for (let m = words.exec(node.data); m; m = words.exec(node.data)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set(Array.from(range.getClientRects())
        .filter(r => r.width > 0).map(r => Math.round(r.bottom)));
      if (lines.size > 1) cut.push(m[0]);
    }
  }
}
return cut;
"""

# The matched elements laid out over more than one line (an instant, an id, a state:
# "2026-12-01" above "22:00:00" is not how a person reads a time). Headers may wrap
# between their words.
SPLIT = """
const split = [];
for (const element of document.querySelectorAll(arguments[0])) {
  const range = document.createRange();
  range.selectNodeContents(element);
  const lines = new Set(Array.from(range.getClientRects())
    .filter(r => r.width > 0).map(r => Math.round(r.bottom)));
  if (lines.size > 1) split.push(element.textContent);
}
return split;
"""
WHOLE = "time, code.job-id, span.state, .running, th.nowrap"

# What a person copies after selecting the element's text.
SELECTED_TEXT = """
const range = document.createRange();
range.selectNodeContents(arguments[0]);
const selection = window.getSelection();
selection.removeAllRanges();
selection.addRange(range);
const text = selection.toString();
selection.removeAllRanges();
return [text, getComputedStyle(arguments[0]).userSelect];
"""


def fits(browser, selector: str) -> bool:
    """The table is as wide as its box: every column in sight, nothing to scroll to."""
    return browser.execute_script(
        "const t = document.querySelector(arguments[0]);"
        "return t.getBoundingClientRect().right <= t.parentElement.getBoundingClientRect().right + 1"
        " && t.getBoundingClientRect().right <= window.innerWidth;", selector)


def listed(instant: datetime) -> str:
    """An instant as the lists show it: its time today, its month, day and time
    otherwise in this year, the whole date before."""
    utc = instant.astimezone(timezone.utc)
    now = datetime.now(timezone.utc)
    if utc.date() == now.date():
        return utc.strftime("%H:%M:%S")
    return utc.strftime("%m-%d %H:%M:%S" if utc.year == now.year else "%Y-%m-%d %H:%M:%S")


def _ready(url: str, queue: str) -> int:
    """How many jobs of ``queue`` are due and waiting, as the database holds them now."""
    db = open_database(url)
    with db.connection_context():
        now_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
        return int(db.execute_sql(
            f"SELECT COUNT(*) FROM caravel_jobs WHERE queue = {db.param} AND state = "
            f"'pending' AND available_at <= {db.param}", (queue, now_ms)).fetchone()[0])


def _state(url: str, job_id: uuid.UUID) -> JobState:
    """The job's state as the database holds it now (another connection than the
    dashboard's)."""
    db = open_database(url)
    with db.connection_context():
        return JobState(QueueAdmin(db).job(job_id).state)


@pytest.fixture
def dashboard(tmp_path):
    """A seeded SQLite database and ``caravel-lite dashboard`` serving it."""
    url = f"sqlite:///{tmp_path / 'queue.sqlite'}"
    # Seeding runs a thousand jobs: without an fsync per commit it takes a second or
    # two instead of ten (a throwaway database; the dashboard opens its own connection).
    db = open_database(url, pragmas={"journal_mode": "wal", "busy_timeout": 5000,
                                     "synchronous": "off"})
    with db.connection_context():
        migrate(db)
        seeded = seed(db, start=datetime.now(timezone.utc) - timedelta(minutes=25),
                      history=240)
        assert add_schedules(QueueScheduler(seeded.queue)).run_once() >= 1
    env = {**os.environ, "CARAVEL_DASHBOARD_TOKEN": TOKEN,
           "CARAVEL_TEST_SCHEDULE_DATABASE": url,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "caravel_lite", "dashboard", "--database", url,
         "--bind", "127.0.0.1:0", "--scheduler", "tests.web.schedules_app:scheduler"],
        env=env, cwd=str(tmp_path),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()  # "...: serving http://127.0.0.1:PORT/ (...)"
        assert "serving http://" in line, (line, process.stderr.read() if process.poll() is not None else "")
        base = line.split("serving ")[1].split()[0].rstrip("/")
        yield base, url, seeded
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_the_dashboard_in_chromium(dashboard, tmp_path):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    chromium, driver_path = require_browser()
    base, url, seeded = dashboard
    shots = Path(os.environ.get("CARAVEL_SCREENSHOT_DIR") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    browser = start_chromium(chromium, driver_path, "ops", TOKEN)
    try:
        # The overview: every queue with its figures, two charts.
        # The seed's four ready jobs, and the nightly schedule's when its run fell in
        # the last six hours (its catch-up window): 05:00-11:00 UTC it is due.
        ready = _ready(url, "reports")
        assert ready in (4, 5)
        browser.get(base + "/")
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="reports"]')
        cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
        assert cells[0] == "reports" and cells[1] == str(ready)
        assert len(browser.find_elements(By.CSS_SELECTOR, "svg.chart")) == 2
        browser.save_screenshot(str(shots / "dashboard-overview.png"))

        # It refreshes itself without a reload: a new job shows up in the ready count.
        browser.execute_script("window.caravelMarker = 42;")
        db = open_database(url)
        with db.connection_context():
            DatabaseQueue(db, registry).enqueue(Mail(99), Dispatch(queue="reports",
                                                                   tenant_id="tenant-b"))

        def ready_count():
            try:
                row = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="reports"]')
                return row.find_elements(By.TAG_NAME, "td")[1].text == str(ready + 1)
            except StaleElementReferenceException:  # swapped by a refresh meanwhile
                return False
        wait_for(ready_count, timeout=20, interval=0.25, message="the live refresh")
        assert browser.execute_script("return window.caravelMarker;") == 42

        # The jobs list as a person reads it.
        browser.get(base + "/jobs")
        headers = [th.text for th in browser.find_elements(By.CSS_SELECTOR, "table.jobs th")]
        assert headers[:10] == ["Job", "Queue", "Tenant", "Wire name", "State", "Attempts",
                                "Last failure", "Enqueued (UTC)", "Started (UTC)",
                                "Finished (UTC)"]
        rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-job-id]")
        shown_ids = [row.find_element(By.CSS_SELECTOR, "a.job-link").text for row in rows]
        assert shown_ids == [row.get_attribute("data-job-id") for row in rows]
        assert len(set(shown_ids)) == len(shown_ids) == 50  # a full page, all told apart
        assert len({text[:8] for text in shown_ids}) < 10  # what the old 8 characters showed
        first_id = rows[0].find_element(By.CSS_SELECTOR, "code.job-id")
        assert browser.execute_script(SELECTED_TEXT, first_id) == [shown_ids[0], "all"]
        browser.save_screenshot(str(shots / "dashboard-jobs.png"))
        assert browser.execute_script(CUT_WORDS, "table.jobs td, table.jobs th") == []
        assert browser.execute_script(SPLIT, WHOLE) == []
        assert fits(browser, "table.jobs")

        def cells_of(job_id):
            row = browser.find_element(By.CSS_SELECTOR, f'tr[data-job-id="{job_id}"]')
            return dict(zip(headers, [td.text for td in row.find_elements(By.TAG_NAME, "td")]))
        admin_db = open_database(url)
        with admin_db.connection_context():
            admin = QueueAdmin(admin_db)
            leased = admin.job(seeded.ids["leased"][0])
            completed = admin.job(seeded.ids["completed"][0])
        browser.get(base + "/jobs?state=leased")
        cells = cells_of(leased.job_id)
        browser.save_screenshot(str(shots / "dashboard-leased.png"))
        assert cells["State"].splitlines()[0] == "leased"
        assert cells["State"].splitlines()[1].startswith("running for ")
        assert cells["Started (UTC)"] == listed(leased.claimed_at)
        browser.get(base + "/jobs?state=completed&queue=emails")
        cells = cells_of(completed.job_id)
        assert cells["Finished (UTC)"] == listed(completed.finished_at)

        # Dead letters name their exception type.
        browser.get(base + "/dead-letters")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-job-id]")
        assert len(rows) == 2
        for row in rows:
            failure = row.find_elements(By.TAG_NAME, "td")[6].text
            assert failure.splitlines() == ["handler_failed", "tests.web.seed.MailRejected"]
        browser.save_screenshot(str(shots / "dashboard-dead-letters.png"))
        assert browser.execute_script(CUT_WORDS, "table.jobs td, table.jobs th") == []
        assert browser.execute_script(SPLIT, WHOLE) == []
        assert fits(browser, "table.jobs")

        # Schedules: every word whole, at the test's window and at a narrow one.
        browser.get(base + "/schedules")
        names = [row.get_attribute("data-schedule")
                 for row in browser.find_elements(By.CSS_SELECTOR, "tr[data-schedule]")]
        assert names == ["digest.hourly", "reports.nightly-summary-for-accounting"]
        last_job = browser.find_element(By.CSS_SELECTOR, "table.schedules a.job-link")
        assert len(last_job.text) == 36 and last_job.text in last_job.get_attribute("href")
        browser.save_screenshot(str(shots / "dashboard-schedules.png"))
        for width in (1280, 900):  # the test's window, and a narrow one (which scrolls)
            browser.set_window_size(width, 900)
            assert browser.execute_script(CUT_WORDS,
                                          "table.schedules td, table.schedules th") == []
            assert browser.execute_script(SPLIT, WHOLE) == [], width
        browser.set_window_size(1280, 900)
        assert fits(browser, "table.schedules")

        # Jobs: filter on the emails queue's dead letters through the form.
        browser.get(base + "/jobs")
        browser.find_element(By.NAME, "queue").send_keys("emails")
        Select(browser.find_element(By.NAME, "state")).select_by_value("dead_letter")
        browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
        wait_for(lambda: "state=dead_letter" in browser.current_url, message="the filter")
        rows = browser.find_elements(By.CSS_SELECTOR, "tr[data-job-id]")
        dead_id = seeded.ids["dead"][0]
        assert [r.get_attribute("data-job-id") for r in rows] == [str(dead_id)]
        # The injected tenant id is shown as text, and no script ran.
        assert rows[0].find_element(By.CSS_SELECTOR, "td.tenant").text == "<script>alert(1)</script>"

        # Its page: the envelope and the failure history.
        rows[0].find_element(By.CSS_SELECTOR, "a.job-link").click()
        history = browser.find_elements(By.CSS_SELECTOR, "table.failures tbody tr")
        assert len(history) == 3
        browser.save_screenshot(str(shots / "dashboard-job.png"))

        # Replay it through the page: the confirmation says how many, then it is done.
        browser.find_element(By.CSS_SELECTOR, "button.action-replay").click()
        assert browser.find_element(By.CSS_SELECTOR, "p.count").get_attribute("data-count") == "1"
        browser.save_screenshot(str(shots / "dashboard-confirm.png"))
        browser.find_element(By.ID, "confirm").click()
        notice = browser.find_element(By.CSS_SELECTOR, "p.notice").text
        assert notice == "Replayed 1 job."
        assert _state(url, dead_id) is JobState.PENDING

        # Cancel the running job through its page: the count, then a cancel request
        # (its worker would end it); pause a queue from the overview; the workers.
        leased_id = seeded.ids["leased"][0]
        browser.get(base + f"/jobs/{leased_id}")
        browser.find_element(By.CSS_SELECTOR, "button.action-cancel").click()
        assert browser.find_element(By.CSS_SELECTOR, "p.count").get_attribute("data-count") == "1"
        browser.find_element(By.ID, "confirm").click()
        assert browser.find_element(By.CSS_SELECTOR, "p.notice").text.startswith("Cancelled 1 job")
        with admin_db.connection_context():
            assert QueueAdmin(admin_db).job(leased_id).cancel_requested_at is not None
            Heartbeats(admin_db).register("5f3c9a0d7e21b4c8", ["emails", "leases"], 4,
                                          int(time.time() * 1000))
        browser.get(base + "/")
        browser.find_element(By.CSS_SELECTOR,
                             'tr[data-queue="reports"] button.action-pause').click()
        assert browser.find_element(By.CSS_SELECTOR, "p.notice").text.startswith("Queue paused")
        with admin_db.connection_context():
            assert QueueAdmin(admin_db).paused() == {"reports"}
        browser.get(base + "/workers")
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-worker="5f3c9a0d7e21b4c8"]')
        assert "alive" in row.text
        browser.save_screenshot(str(shots / "dashboard-workers.png"))
        assert browser.get_log("browser") == []  # no script error, no failed asset
    finally:
        browser.quit()
    for name in SHOTS:
        assert (shots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
