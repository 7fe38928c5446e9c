"""Browser tests: Playwright driving Debian's Chromium against pytest-django's live server."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


@pytest.fixture
def off_the_browser_thread():
    """off_the_browser_thread(work) runs `work()` (ORM calls, a scheduling pass) in a thread of its own.

    Playwright's sync API runs an event loop in the test's thread, where Django refuses
    database work; a plain thread that closes its connection is what a worker is.
    """

    def run_off(work):
        def run():
            try:
                return work()
            finally:
                connection.close()

        with ThreadPoolExecutor(1) as thread:
            return thread.submit(run).result()

    return run_off


@pytest.fixture
def browser():
    """A headless Chromium for one test; ask for the database fixtures before this one."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def screenshot():
    """screenshot(page, name): save the page under test-artifacts/ for a person to look at."""
    ARTIFACTS.mkdir(exist_ok=True)

    def save(page, name):
        page.screenshot(path=ARTIFACTS / f"{name}.png", full_page=True)

    return save


@pytest.fixture
def log_in(live_server):
    """log_in(browser, username, password) -> a page of a fresh browser context, logged in via the form."""

    def log_in(browser, username, password):
        page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        page.goto(f"{live_server.url}/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("main button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return page

    return log_in
