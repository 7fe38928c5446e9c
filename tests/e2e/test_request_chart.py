"""The request page's utilization chart after a reload: a finished request shows its own time range."""

import datetime as dt

import pytest
import time_machine
from django.utils import timezone
from playwright.sync_api import expect

from scheduler_app.services.placement import Slice, allocate
from scheduler_app.services.requests import release_request, submit_request
from scheduler_app.services.transitions import transition_request
from tests.telemetry.telemetry_helpers import plant

pytestmark = pytest.mark.e2e


@pytest.fixture
def finished(make_node, member, team):
    """A request that held node-1/gpu0 from 10 to 2 minutes ago, the card read every 15 s for 20 minutes:
    before it began (at 90 %), while it ran (at 40 %) and after it ended (at 5 %)."""
    card = make_node("node-1", gpus=1).gpus.get()
    now = timezone.now()
    request = submit_request(user=member, team=team, name="done", task_type="training", gpu_milli=500)
    with time_machine.travel(now - dt.timedelta(minutes=10), tick=False):
        allocate(request, [Slice(card.pk, 500, 8192)])
        transition_request(request, "running", actor_name="agent")
    with time_machine.travel(now - dt.timedelta(minutes=2), tick=False):
        release_request(request, user=member)
    utils = [90] * 40 + [40] * 32 + [5] * 8
    plant(card, now - dt.timedelta(minutes=20), utils, every_s=15)
    return request, request.allocations.get()


def test_a_finished_requests_chart_after_a_reload_spans_its_own_time_and_readings(
    finished, live_server, browser, log_in, screenshot
):
    # given the page of a request that has ended
    request, segment = finished
    page = log_in(browser, "bob", "pw-bob-123")

    # when it is opened (a reload: no live points, only what the page reads)
    page.goto(f"{live_server.url}/requests/{request.pk}/")
    chart = page.locator("#util-chart")
    expect(chart).to_have_attribute("data-seeded", "1")

    # then its axis runs from its slice's start to its end, not plotly's empty Jan-Nov 2000
    start, end = page.evaluate("document.getElementById('util-chart').layout.xaxis.range")
    assert start[:19] == segment.started_at.strftime("%Y-%m-%dT%H:%M:%S")
    assert end[:19] == segment.ended_at.strftime("%Y-%m-%dT%H:%M:%S")
    ticks = " ".join(chart.locator(".xtick text").all_text_contents())
    assert "2000" not in ticks
    # and its line holds only the readings taken while it held the card
    utils = page.evaluate("document.getElementById('util-chart').data[0].y")
    assert set(utils) == {40} and len(utils) in {31, 32, 33}
    screenshot(page, "request-chart-finished")
