"""Browser tests: Playwright driving Debian's Chromium against pytest-django's live server, or, for
websockets, the ASGI application served by uvicorn in a thread of the test process."""

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection

# The real Slurm test cluster's fixtures, for the browser test of a Slurm pool.
from tests.slurm_backend.conftest import no_slurm_jobs, slurm_cluster  # noqa: F401

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


def log_in_at(base_url, browser, username, password, **context):
    """A page of a fresh browser context (1280 x 900 unless `context` says otherwise: a viewport,
    permissions), logged in through the form at base_url."""
    page = browser.new_context(**{"viewport": {"width": 1280, "height": 900}, **context}).new_page()
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


class AsgiServer:
    """The whole ASGI application (pages and websockets) served by uvicorn in a thread, on a fixed
    loopback port, so a test may stop it and start it again (clients reconnect to the same URL)."""

    def __init__(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = self._thread = None

    def start(self) -> None:
        import uvicorn

        from portal.asgi import application

        config = uvicorn.Config(
            application,
            host="127.0.0.1",
            port=self.port,
            lifespan="off",
            log_level="warning",
            timeout_graceful_shutdown=3,  # then `stop` ends what is still open: no server outlives its test
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self._server.started, "uvicorn did not start"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@pytest.fixture
def asgi_server(sqlite_readers_take_no_table_locks):
    """An AsgiServer, started. In the test process, so it shares the test database and, without Redis,
    the in-memory channel layer: what a thread of this process publishes reaches the pages' websockets.
    """
    server = AsgiServer()
    server.start()
    yield server
    server.stop()
