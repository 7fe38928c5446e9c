"""JupyterLab in Chromium: a member opens the Lab of a 1/4-card interactive request from its page, through
the portal's proxy, on an isolated node; a notebook cell shows the slice's card and share and the team's
account."""

import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

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
    trouble, pending = watch_for_trouble(page.context)
    with page.context.expect_page() as opened:
        page.get_by_role("link", name="JupyterLab").click()
    lab = opened.value
    try:
        output = run_the_cell(lab)
    except PlaywrightTimeout as error:
        screenshot(lab, "jupyterlab-failed")
        shown = lab.locator("body").inner_text()[:2000]
        problems = trouble + list(pending.values())
        raise AssertionError(
            f"{error}\nwhat went wrong on the page: {problems}\nthe page showed: {shown}"
        ) from None

    assert lab.url.startswith(f"{portal.url}/requests/{request.pk}/lab/")
    account = team_account(PREFIX, "vision")
    assert output.inner_text().split() == [f"cards={card}", "milli=250", f"user={account}"]
    screenshot(lab, "jupyterlab")


def watch_for_trouble(context) -> tuple[list[str], dict]:
    """What goes wrong in the browser's pages from now on, for a failure's message: answers of 400 and
    up, requests that failed, uncaught script errors, console errors, and (read at the failure) the
    requests still unanswered."""
    trouble, pending = [], {}
    context.on("request", lambda r: pending.__setitem__(r, f"unanswered {r.method} {r.url}"))
    context.on("requestfinished", lambda r: pending.pop(r, None))
    context.on(
        "response", lambda r: r.status >= 400 and trouble.append(f"{r.status} {r.request.method} {r.url}")
    )
    context.on(
        "requestfailed",
        lambda r: (pending.pop(r, None), trouble.append(f"failed {r.method} {r.url}: {r.failure}")),
    )
    context.on("weberror", lambda e: trouble.append(f"script error: {e.error}"))
    context.on("console", lambda m: m.type == "error" and trouble.append(f"console: {m.text}"))
    return trouble, pending


def run_the_cell(lab):
    """A new notebook from the launcher, the cell typed and run: its output's locator."""
    lab.locator(".jp-LauncherCard[data-category='Notebook']").first.click(timeout=LAB_START_MS)
    # A cell run before the notebook has its kernel is dropped by JupyterLab itself: wait for it, as
    # a user waits for the status bar's "Idle".
    lab.get_by_text(re.compile(r"ipykernel\) \| Idle")).wait_for(timeout=LAB_START_MS)
    lab.locator(".jp-Notebook .jp-Cell .cm-content").first.click(timeout=LAB_START_MS)
    lab.keyboard.insert_text(CELL.replace("\n", "; "))
    lab.keyboard.press("Shift+Enter")
    output = lab.locator(".jp-OutputArea-output").first
    output.wait_for(timeout=LAB_START_MS)
    return output
