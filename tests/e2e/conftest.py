"""Browser tests: Playwright driving Debian's Chromium against pytest-django's live server, or, for
websockets, the ASGI application served by uvicorn in a thread of the test process."""

import socket
import threading
import time
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


def log_in_at(base_url, browser, username, password):
    """A page of a fresh browser context, logged in through the form at base_url."""
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{base_url}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("main button[type=submit]")
    page.wait_for_url(f"{base_url}/")
    return page


@pytest.fixture
def log_in(live_server):
    """log_in(browser, username, password) -> a page of a fresh browser context, logged in via the form."""
    return lambda browser, username, password: log_in_at(live_server.url, browser, username, password)


@pytest.fixture
def asgi_server(transactional_db):
    """The whole ASGI application (pages and websockets) on a free loopback port; yields its URL.

    In the test process, so it shares the test database and, without Redis, the in-memory channel
    layer: what a thread of this process publishes reaches the pages' websockets.
    """
    import uvicorn

    from portal.asgi import application

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(application, host="127.0.0.1", port=port, lifespan="off", log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
