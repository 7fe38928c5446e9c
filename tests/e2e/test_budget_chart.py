"""The burn-down chart always shows the budget line: its y-axis runs from 0 to above both the budget and
the forecast, and the budget is labelled, whether it lies far under the forecast (0.25 USD beside
thousands) or far above it."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing_app.budgets import set_budget
from billing_app.metering import meter_usage
from billing_app.models import PoolPrice
from scheduler_app.choices import RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.services.placement import PlannedStart, Slice, place
from scheduler_app.services.transitions import transition_requests

pytestmark = pytest.mark.e2e

CHART = "document.getElementById('burn-down')"


@pytest.fixture
def burning(team, team_admin, make_node, pool):
    """Four whole cards at 10 USD an hour each running for the last half hour, metered: a forecast of
    thousands of USD for the month."""
    now = timezone.now()
    PoolPrice.objects.create(
        pool=pool, usd_per_gpu_hour=Decimal("10"), effective_from=now - dt.timedelta(days=2)
    )
    began = max(now - dt.timedelta(minutes=30), now.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    for card in make_node(gpus=4).gpus.all():
        request = GpuRequest.objects.create(
            team=team, user=team_admin, name=f"train-{card.index}", gpu_milli=1000
        )
        place([PlannedStart(request.pk, (Slice(card.pk, 1000, 1024),), "on-demand")], now=began)
        transition_requests(
            [request.pk], RequestState.RUNNING, from_states=[RequestState.SCHEDULED], now=began
        )
    meter_usage()
    return team


def drawn(page):
    page.wait_for_function(f"() => {CHART}.data && {CHART}.data.length === 3")
    return page.evaluate(
        f"""() => ({{
            range: {CHART}._fullLayout.yaxis.range,
            forecast: {CHART}.data[1].y[1],
            budget: {CHART}.data[2].y[0],
            labels: ({CHART}.layout.annotations || []).map(a => a.text),
        }})"""
    )


@pytest.fixture(params=["0.25", "1000000.00"])
def monthly_usd(request, burning, team_admin):
    """A budget far under the forecast, and one far above it."""
    set_budget(burning, actor=team_admin, monthly_usd=request.param)
    return request.param


def test_the_budget_line_is_on_the_chart_and_labelled_however_far_from_the_forecast(
    burning, monthly_usd, live_server, browser, log_in, screenshot
):
    page = log_in(browser, "alice", "pw-alice-123")

    page.goto(f"{live_server.url}/teams/{burning.slug}/budget/")
    chart = drawn(page)

    assert chart["budget"] == float(monthly_usd) and chart["forecast"] > 1000
    low, high = chart["range"]
    assert low == 0 and high >= 1.05 * max(chart["budget"], chart["forecast"])  # neither on the edge
    assert f"Budget {monthly_usd} USD" in chart["labels"]
    screenshot(page, f"budget-chart-{monthly_usd}")
