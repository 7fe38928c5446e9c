"""The request form's "Which share to take": the chart of time against cost and the pick, from the
workload's earlier runs; the pick's share can be taken into the form."""

import datetime as dt

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing_app.services import set_pool_price
from scheduler_app.choices import CapacityType, RequestState
from scheduler_app.models import GpuRequest
from scheduler_app.services.inventory import create_pool

pytestmark = pytest.mark.e2e


@pytest.fixture
def history(make_node, team, member, operator, pool):
    """Priced on-demand and spot pools, and three finished runs of `python train.py` (the field data)."""
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    make_node("ondemand-1", gpus=2)
    make_node("spot-1", gpus=2, pool=spot)
    set_pool_price(pool, "3.00", actor=operator)
    set_pool_price(spot, "1.00", actor=operator)
    end = timezone.now() - dt.timedelta(hours=1)
    for milli, hours in ((1000, 2.0), (750, 2.3), (500, 3.2)):
        GpuRequest.objects.create(
            team=team,
            user=member,
            name="train",
            gpu_milli=milli,
            command="python train.py",
            state=RequestState.SUCCEEDED,
            started_at=end - dt.timedelta(hours=hours),
            ended_at=end,
        )


def test_the_form_charts_the_options_and_takes_the_recommended_share(
    history, live_server, browser, log_in, screenshot
):
    page = log_in(browser, "bob", "pw-bob-123")
    page.goto(f"{live_server.url}/requests/new/")
    page.fill("#id_name", "finetune")
    page.fill("#id_command", "python train.py")
    page.fill("#recommend-deadline", "2.5")

    # 0.75 on spot: 2.3 h (band 2.415 h) meets 2.5 h; 0.75 x 2.3 h x $1 = $1.73 is the least.
    expect(page.locator("#recommend-text")).to_contain_text(
        "0.75 of a card on spot costs least (about $1.73)"
    )
    expect(page.locator("#recommend-text")).to_contain_text("Predicted from its earlier runs")
    expect(page.locator("#recommend-chart .main-svg").first).to_be_visible()
    screenshot(page, "recommend-chart")

    page.click("#recommend-apply")
    expect(page.locator("#id_share")).to_have_value("750")
    expect(page.locator("#id_billing_mode_1")).to_be_checked()
