"""A member watches their request's log arrive on its page as the node's agent ships it, no reload."""

import threading

import pytest
from playwright.sync_api import expect

from tests.agent_fixtures import DEMO_JOB

pytestmark = pytest.mark.e2e


@pytest.fixture
def placed_with_agent(place, start_agent):
    """A short job that ends with status 4, scheduled on node-1, and node-1's agent (not yet running).
    Made before the browser: Playwright's loop in the test's thread forbids database work."""
    return place(f"{DEMO_JOB} --seconds 3 --exit-code 4"), start_agent(interval_s=0.3)


def test_the_request_page_tails_the_jobs_log_and_shows_its_exit_status(
    placed_with_agent, live_server, browser, log_in, screenshot
):
    request, agent = placed_with_agent
    page = log_in(browser, "bob", "pw-bob-123")
    page.goto(f"{live_server.url}/requests/{request.pk}/")
    expect(page.locator("#job-log-status")).to_contain_text("No output yet")

    rounds = threading.Thread(target=agent.run, daemon=True)
    rounds.start()
    try:
        expect(page.locator("#job-log")).to_contain_text("starting at step 0", timeout=20_000)
        expect(page.locator("#job-log")).to_contain_text("done after", timeout=20_000)
        expect(page.locator("#job-log-status")).to_have_text(
            "The request is failed, exit status 4.", timeout=20_000
        )
        screenshot(page, "request-log")
    finally:
        agent.stop()
        rounds.join(timeout=30)
