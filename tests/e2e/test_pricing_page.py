"""The pricing page in a browser: plotly draws each pool's price history as a step line."""

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing_app.models import PoolPrice
from scheduler_app.choices import CapacityType
from scheduler_app.services.inventory import create_pool

SHAPE = "gpu_model=A100-80GB&share=500&max_duration_h=8&checkpoint_interval_min=30"


@pytest.fixture
def price_history(pool):
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    start = timezone.now() - dt.timedelta(hours=2)
    PoolPrice.objects.create(pool=pool, usd_per_gpu_hour=Decimal("4.00"), effective_from=start)
    for minutes, price in ((0, "1.00"), (30, "1.40"), (60, "1.10")):
        at = start + dt.timedelta(minutes=minutes)
        PoolPrice.objects.create(pool=spot, usd_per_gpu_hour=Decimal(price), effective_from=at)


def test_the_price_history_chart_draws_one_line_per_pool(
    live_server, price_history, member, browser, log_in, screenshot
):
    page = log_in(browser, "bob", "pw-bob-123")
    page.goto(f"{live_server.url}/prices/?{SHAPE}")
    page.wait_for_function("document.getElementById('price-chart').data !== undefined")
    lines = page.evaluate("document.getElementById('price-chart').data.map(t => [t.name, t.line.shape, t.y])")
    assert ["a100-spot (spot)", "hv", [1.0, 1.4, 1.1, 1.1]] in lines
    assert ["a100 (on-demand)", "hv", [4.0, 4.0]] in lines
    assert page.locator("#price-chart .main-svg").count() >= 1
    assert "Spot, reclaims counted" in page.locator("#quote").inner_text()
    screenshot(page, "pricing-page")
