"""Issue 9's acceptance in a browser, on the demo as `bin/run-portal` runs it (the embedded default with
its simulated agents), metering every 2 s rather than every 30 s: spot prices move, the request form
shows a same-model quote and a recommendation, and on the budget page that stays open the metered
spend grows and the 80 % alert appears, through the team's stream: no reload."""

import math
import re
import time
from decimal import ROUND_CEILING, Decimal

import pytest
from playwright.sync_api import expect

from infra.money import usd
from tests.e2e.conftest import log_in_at
from tests.embedded_portal import embedded_portal

pytestmark = pytest.mark.e2e

NOT_RELOADED = "window.stillTheSamePage === true"
SPENT = (
    "Number(document.querySelector('#budget-live [data-field=spend_usd]').textContent.replace(/[$,]/g, ''))"
)
CROSSING_AFTER_S = 20  # the budget is set so that 80 % is crossed about this long after it is saved
PRICES_MOVE_WITHIN_S = 90  # of the portal's start: the demo replays a recorded day of spot prices a second
FAST = {"METERING_INTERVAL_S": "2", "METERING_SETTLE_S": "2", "SCHEDULER_INTERVAL_S": "2"}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    with embedded_portal(
        tmp_path_factory.mktemp("budget-live"), "--simulated-agents", settings=FAST
    ) as portal:
        yield portal


def dollars(text: str) -> Decimal:
    """The amount a page shows as "$1,234.50"."""
    return Decimal(text.removeprefix("$").replace(",", ""))


def spot_points(page, url) -> dict[str, int]:
    """Points of each spot pool's price history over the last hour, from the API."""
    answer = page.request.get(f"{url}/api/v1/prices/history/?hours=1")
    assert answer.ok, answer.text()
    return {h["pool"]: len(h["points"]) for h in answer.json() if h["capacity_type"] == "spot"}


def test_spend_grows_live_the_80_percent_alert_appears_prices_move_and_the_form_quotes(
    demo, browser, screenshot
):
    page = log_in_at(demo.url, browser, "alice", "gpu-portal-demo")
    prices_before = spot_points(page, demo.url)
    assert prices_before, "the demo has spot pools with a price history"

    # (a) The budget page: a budget whose 80 % the demo's running work reaches about
    # CROSSING_AFTER_S from now, set through the page's form.
    page.goto(f"{demo.url}/teams/vision/budget/")
    burn = dollars(page.locator("#budget-live [data-field=burn_usd_per_hour]").inner_text())
    assert burn > 0, "the demo's Vision work is running on priced cards"
    spent = dollars(page.locator("#budget-live [data-field=spend_usd]").inner_text())
    soon = spent + burn * CROSSING_AFTER_S / 3600
    budget = (soon / Decimal("0.8")).quantize(Decimal("0.01"), rounding=ROUND_CEILING)
    page.fill("#id_monthly_usd", str(budget))
    page.fill("#id_thresholds", "80")
    page.click("form[action$='/budget/set/'] button[type=submit]")
    expect(page.locator("#budget-live")).to_contain_text(f"of {usd(budget)}")
    expect(page.locator("#budget-alerts")).not_to_contain_text("past 80 %")

    # (b) Without a reload, the metered spend grows, the chart with it, and the 80 % alert appears.
    page.evaluate("window.stillTheSamePage = true")
    expect(page.locator("#live-status")).to_have_text("● live")
    first = page.evaluate(SPENT)
    page.wait_for_function(f"before => {SPENT} > before", arg=first, timeout=30_000)
    grown = page.evaluate(SPENT)
    page.wait_for_function(f"before => {SPENT} > before", arg=grown, timeout=30_000)
    last_point = page.evaluate("document.getElementById('burn-down').data[0].y.slice(-1)[0]")
    assert math.isclose(last_point, page.evaluate(SPENT), abs_tol=0.011)  # drawn from the same message
    expect(page.locator("#budget-alerts")).to_contain_text("past 80 %", timeout=90_000)
    assert Decimal(page.locator("#budget-live [data-field=percent_used]").inner_text()) >= 80
    expect(page.locator("#budget-breakdown")).to_contain_text("alice")
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "budget-80-percent-live")

    # (c) The request form: the same-model quote (on-demand against spot) and a recommendation.
    page.goto(f"{demo.url}/requests/new/")
    page.fill("#id_name", "quote-check")
    page.fill("#id_command", "python -m agent.demo_job --seconds 8")
    page.select_option("#id_gpu_model", "A100-80GB")
    page.fill("#id_max_duration_h", "4")
    page.fill("#recommend-deadline", "4")
    quote = page.locator("#price-lines")
    expect(quote).to_contain_text(
        re.compile(r"A100-80GB: on-demand \$[\d.]+/h · spot \$[\d.]+/h"), timeout=15_000
    )
    expect(quote).to_contain_text(re.compile(r"Over 4 h: on-demand \$[\d.]+"))
    expect(quote).to_contain_text(re.compile(r"Spot \$[\d.]+ nominal, \$[\d.]+ expected with"))
    expect(page.locator("#recommend-text")).to_contain_text("costs least", timeout=15_000)
    expect(page.locator("#recommend-chart .main-svg").first).to_be_visible()
    screenshot(page, "budget-live-request-form")

    # (d) Spot prices moved meanwhile: the history API has new points.
    deadline = demo.started_at + PRICES_MOVE_WITHIN_S
    while time.monotonic() < deadline and spot_points(page, demo.url) == prices_before:
        time.sleep(1)
    prices_after = spot_points(page, demo.url)
    assert any(prices_after[pool] > count for pool, count in prices_before.items()), (
        prices_before,
        prices_after,
    )
