"""A member who opens an operator page sees the portal's own refusal, with its navigation and a way back."""

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.e2e


def test_a_member_on_an_operator_page_sees_a_styled_refusal_and_finds_the_way_back(
    member, live_server, browser, log_in, screenshot
):
    page = log_in(browser, "bob", "pw-bob-123")

    response = page.goto(f"{live_server.url}/operator/")

    assert response.status == 403
    expect(page.locator("main h1")).to_have_text("You may not open this page")
    expect(page.locator("main")).to_contain_text("Operator pages are for platform operators.")
    expect(page.locator("nav.main-nav")).to_be_visible()
    screenshot(page, "error-403")
    page.click("text=Back to the portal's home page")
    page.wait_for_url(f"{live_server.url}/")
