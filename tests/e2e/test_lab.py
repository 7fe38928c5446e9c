"""JupyterLab in Chromium: a member opens the Lab of a 1/4-card interactive request from its page, through
the portal's proxy, on an isolated node; a notebook cell shows the slice's card and share and the team's
account."""

import re

import pytest

from agent.isolation.identity import team_account
from tests.agent.test_lab_isolated import CELL, lab_agent, portal, scratch  # noqa: F401  (fixtures)
from tests.agent.test_sessions_isolated import PREFIX
from tests.e2e.conftest import log_in_at

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("fresh_channel_layer")]

LAB_START_MS = 120_000  # Jupyter starts on the first visit, in the job's isolation, on a 2-core runner


def test_a_member_runs_a_cell_in_jupyterlab_with_the_slice_and_the_teams_identity(
    portal,  # noqa: F811
    lab_agent,  # noqa: F811
    browser,
    screenshot,
    off_the_browser_thread,
):
    request = lab_agent.request
    card = off_the_browser_thread(lambda: request.allocations.get().gpu.uuid)
    page = log_in_at(portal.url, browser, "bob", "pw-bob-123")
    page.goto(f"{portal.url}/requests/{request.pk}/")
    with page.context.expect_page() as opened:
        page.get_by_role("link", name="JupyterLab").click()
    lab = opened.value

    lab.locator(".jp-LauncherCard[data-category='Notebook']").first.click(timeout=LAB_START_MS)
    # A cell run before the notebook has its kernel is dropped by JupyterLab itself: wait for it, as
    # a user waits for the status bar's "Idle".
    lab.get_by_text(re.compile(r"ipykernel\) \| Idle")).wait_for(timeout=LAB_START_MS)
    lab.locator(".jp-Notebook .jp-Cell .cm-content").first.click(timeout=LAB_START_MS)
    lab.keyboard.insert_text(CELL.replace("\n", "; "))
    lab.keyboard.press("Shift+Enter")
    output = lab.locator(".jp-OutputArea-output").first
    output.wait_for(timeout=LAB_START_MS)

    assert lab.url.startswith(f"{portal.url}/requests/{request.pk}/lab/")
    account = team_account(PREFIX, "vision")
    assert output.inner_text().split() == [f"cards={card}", "milli=250", f"user={account}"]
    screenshot(lab, "jupyterlab")
