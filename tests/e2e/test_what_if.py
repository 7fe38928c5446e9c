"""Issue 11's what-if acceptance in a browser: the embedded default as `bin/run-portal` starts it; `ops`
replays the demo's own history (its seeded week) with another node added and a p95 target, follows the
run's progress, and sees the actual and what-if charts and the recommendation; utilization is drawn in
percent on a 0-100 % axis, and the cost says which time it covers."""

import pytest
from playwright.sync_api import expect

from demo.seed import DEMO_PASSWORD
from tests.e2e.conftest import log_in_at
from tests.embedded_portal import embedded_portal

pytestmark = pytest.mark.e2e

DELAY_BARS = "document.getElementById('what-if-delays').data"
CLUSTER = "document.getElementById('what-if-cluster')"


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with embedded_portal(tmp_path_factory.mktemp("what-if")) as portal:
        yield portal


def test_ops_replays_the_demo_history_and_sees_the_result_charts(demo, browser, screenshot):
    page = log_in_at(demo.url, browser, "ops", DEMO_PASSWORD)
    page.goto(f"{demo.url}/operator/what-if/")
    page.fill("textarea[name=nodes]", "rtx4090 +1")
    page.fill("input[name=target_p95_s]", "60")
    page.click("#what-if-form button[type=submit]")
    page.wait_for_url(f"{demo.url}/operator/what-if/*/")

    expect(page.locator("#what-if-status")).to_have_text("Succeeded", timeout=60_000)
    expect(page.locator("#what-if-percent")).to_have_text("100 %")
    page.wait_for_function(f"() => {DELAY_BARS} && {DELAY_BARS}.length === 4", timeout=10_000)
    traces = page.evaluate(f"{DELAY_BARS}.map(t => t.name)")
    assert traces == ["Actual mean", "Actual p95", "What-if mean", "What-if p95"]
    teams = page.evaluate(f"{DELAY_BARS}[0].x")
    assert set(teams) <= {"vision", "language"} and teams
    assert page.evaluate(f"{CLUSTER}.data.length") == 6
    # utilization in percent, on a 0-100 % axis: the demo's busy week shows as a bar of tens of percent
    assert page.evaluate(f"{CLUSTER}._fullLayout.yaxis.range") == [0, 100]
    actual_utilization = page.evaluate(f"{CLUSTER}.data[0].y[0]")
    assert page.evaluate(f"{CLUSTER}.data[0].x[0]") == "Utilization %" and 20 < actual_utilization < 90
    expect(page.locator("#what-if-summary")).to_contain_text("requests replayed")
    expect(page.locator("#what-if-summary")).to_contain_text("USD over the 7 days the history covers")
    expect(page.locator("#what-if-summary")).to_contain_text(
        "GPUs 48 → 52"
    )  # 3x8 + 2x8 + 2x4, one 4-card node more
    expect(page.locator("#what-if-recommendation")).not_to_be_empty()
    screenshot(page, "what-if-01-result")
