"""Headless Chromium for the browser test: Debian's ``chromium`` and
``chromium-driver`` packages, driven by Selenium (no browser download)."""
from __future__ import annotations

import base64
import os
import shutil
from typing import Optional

import pytest

from tests.databases import in_ci

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def _find(names, env: str) -> Optional[str]:
    if os.environ.get(env):
        return os.environ[env]
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_browser():
    """(chromium, chromedriver) paths; a missing browser fails under CI and skips
    elsewhere (.ci/run installs both)."""
    chromium = _find(CHROMIUM_NAMES, "CARAVEL_TEST_CHROMIUM")
    driver = _find(("chromedriver",), "CARAVEL_TEST_CHROMEDRIVER")
    try:
        import selenium  # noqa: F401
    except ImportError:
        selenium_missing = True
    else:
        selenium_missing = False
    missing = [what for what, path in (("chromium", chromium), ("chromedriver", driver))
               if path is None] + (["selenium"] if selenium_missing else [])
    if missing:
        reason = f"the browser test needs {', '.join(missing)} (apt-get install chromium chromium-driver)"
        if in_ci():
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    return chromium, driver


def start_chromium(chromium: str, driver: str, user: str, secret: str):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1280,900", "--no-first-run",
                     "--disable-extensions", "--hide-scrollbars"):
        options.add_argument(argument)
    browser = webdriver.Chrome(options=options, service=Service(driver))
    # The dashboard asks for HTTP Basic credentials; send them with every request, as a
    # browser does once the user has typed them into its prompt.
    credentials = base64.b64encode(f"{user}:{secret}".encode()).decode()
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.setExtraHTTPHeaders",
                            {"headers": {"Authorization": f"Basic {credentials}"}})
    browser.set_page_load_timeout(30)
    # A click that submits a form returns before the next page is there: lookups wait
    # for their element (up to 10 s) rather than read the page being left.
    browser.implicitly_wait(10)
    return browser
