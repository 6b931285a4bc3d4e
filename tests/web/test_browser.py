"""The dashboard in a real browser: headless Chromium against ``caravel-lite
dashboard`` serving a seeded SQLite database. Loads the overview (and sees it refresh
itself), filters the jobs, opens a dead letter's failure history, replays it through
the page and checks the database; saves screenshots (to $CARAVEL_SCREENSHOT_DIR when
set, which is how docs/dashboard-*.png are made)."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from caravel_lite import DatabaseQueue, Dispatch, QueueAdmin, migrate, open_database
from caravel_lite.values import JobState
from tests.support import wait_for
from tests.web.browser import require_browser, start_chromium
from tests.web.seed import Mail, registry, seed

TOKEN = "browser-test-token-0123456"
REPO = Path(__file__).resolve().parents[2]


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
    env = {**os.environ, "CARAVEL_DASHBOARD_TOKEN": TOKEN,
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "caravel_lite", "dashboard", "--database", url,
         "--bind", "127.0.0.1:0"], env=env, cwd=str(tmp_path),
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
        browser.get(base + "/")
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-queue="reports"]')
        cells = [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
        assert cells[0] == "reports" and cells[1] == "4"  # four ready jobs
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
                return row.find_elements(By.TAG_NAME, "td")[1].text == "5"
            except StaleElementReferenceException:  # swapped by a refresh meanwhile
                return False
        wait_for(ready_count, timeout=20, interval=0.25, message="the live refresh")
        assert browser.execute_script("return window.caravelMarker;") == 42

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
        assert browser.get_log("browser") == []  # no script error, no failed asset
    finally:
        browser.quit()
    for name in ("dashboard-overview.png", "dashboard-job.png", "dashboard-confirm.png"):
        assert (shots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
