"""Issue 8's acceptance in a browser: the demo as `bin/run-portal` runs it (the embedded default with a
simulated node agent per demo node). Within 30 s of start the cluster heatmap moves, and a request
submitted from the page runs, shows its log and its utilization, and ends Succeeded with its exit
status, all on the page that was open, through the websocket: no reload."""

import time

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import log_in_at
from tests.embedded_portal import embedded_portal

pytestmark = pytest.mark.e2e

ALIVE_WITHIN_S = 30
NOT_RELOADED = "window.stillTheSamePage === true"
HEAT = "JSON.stringify(document.getElementById('heatmap').data[0].z)"
BUSY = "document.getElementById('heatmap').data[0].z.flat().filter(v => v > 0)"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with embedded_portal(tmp_path_factory.mktemp("live-demo"), "--simulated-agents") as portal:
        yield portal


def mark(page):
    """A flag that a reload or a navigation would wipe out, set once the page's stream is open."""
    page.evaluate("window.stillTheSamePage = true")
    expect(page.locator("#live-status")).to_have_text("● live")


def test_the_demo_cluster_moves_and_a_new_request_runs_to_its_end_live(demo, browser, screenshot):
    page = log_in_at(demo.url, browser, "bob", "gpu-portal-demo")

    # (a) The cluster page: the heatmap's values change without a reload, within 30 s of start.
    page.goto(f"{demo.url}/cluster/")
    mark(page)
    deadline = demo.started_at + ALIVE_WITHIN_S

    def until_changed_from(before):
        """Wait, no later than 30 s after start, for the heatmap to differ from `before` with a busy card."""
        left_ms = max(1_000, (deadline - time.monotonic()) * 1000)
        page.wait_for_function(
            f"before => {HEAT} !== before && {BUSY}.length > 0", arg=before, timeout=left_ms
        )
        return page.evaluate(HEAT)

    busy = until_changed_from(page.evaluate(HEAT))
    until_changed_from(busy)  # and it keeps moving
    assert time.monotonic() <= deadline + 1
    assert int(page.locator("#heatmap").get_attribute("data-updates")) >= 2
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "demo-01-cluster-moving")

    # (b) A request from the page's form; its detail page follows it from Scheduled to Succeeded.
    page.goto(f"{demo.url}/requests/new/")
    page.fill("input[name=name]", "acceptance-run")
    page.fill("textarea[name=command]", "python -m agent.demo_job --seconds 8")
    page.click("#request-form button[type=submit]")
    page.wait_for_url(f"{demo.url}/requests/*/")
    request_id = int(page.url.rstrip("/").rsplit("/", 1)[1])
    mark(page)

    expect(page.locator("#state")).to_have_text("Running", timeout=30_000)
    expect(page.locator("#job-log")).to_contain_text("starting at step 0", timeout=20_000)
    # Its allocation's util line and dashed memory line: points from the stream's ticks, the card busy.
    page.wait_for_function(
        "() => { const c = document.getElementById('util-chart');"
        " return c.data && c.data.length === 2 && c.data[0].y.some(v => v > 0)"
        " && c.data[1].name.endsWith(' memory') && c.data[1].y.some(v => v > 0); }",
        timeout=20_000,
    )
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "demo-02-request-running")

    expect(page.locator("#state")).to_have_text("Succeeded", timeout=40_000)
    expect(page.locator("#exit-code")).to_have_text("0")
    expect(page.locator("#timeline")).to_contain_text("running")
    expect(page.locator("#timeline")).to_contain_text("succeeded")
    expect(page.locator("#job-log")).to_contain_text("done after", timeout=10_000)
    expect(page.locator("#job-log-status")).to_have_text("The request is succeeded, exit status 0.")
    assert page.evaluate(NOT_RELOADED)
    assert page.url.endswith(f"/requests/{request_id}/")
    screenshot(page, "demo-03-request-succeeded")
