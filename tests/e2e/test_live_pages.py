"""The pages follow the live streams: a state change and new utilization appear without a reload."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from scheduler_app.live.ticker import tick
from scheduler_app.models import GpuRequest
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.requests import cancel_request, submit_request
from telemetry.models import GpuSample
from tests.e2e.conftest import log_in_at

pytestmark = pytest.mark.e2e


@pytest.fixture
def node(make_node):
    return make_node("node-1", gpus=2)


NOT_RELOADED = "window.stillTheSamePage === true"


def read_card_of(request_name, util):
    """What an agent's batch and the next tick do: a reading of the request's card, then a tick."""
    request = GpuRequest.objects.get(name=request_name)
    card = request.allocations.get(ended_at__isnull=True).gpu
    GpuSample.objects.create(
        gpu=card,
        sampled_at=timezone.now(),
        gpu_util_percent=util,
        memory_used_mib=1,
        power_mw=1,
        temperature_c=40,
    )
    tick()
    return card.pk


def mark(page):
    """A flag that a reload would wipe out."""
    page.evaluate("window.stillTheSamePage = true")
    expect(page.locator("#live-status")).to_have_text("● live")


def test_request_list_and_detail_update_in_place_through_the_websocket(
    asgi_server, node, team, member, browser, screenshot, off_the_browser_thread
):
    request = off_the_browser_thread(
        lambda: submit_request(user=member, team=team, name="live-e2e", task_type="training", gpu_milli=500)
    )
    page = log_in_at(asgi_server.url, browser, "bob", "pw-bob-123")

    # The list: the pass schedules the request; its row says so without a reload.
    page.goto(f"{asgi_server.url}/requests/")
    row = page.locator("tr", has_text="live-e2e")
    expect(row.locator(".badge")).to_have_text("Pending")
    mark(page)
    off_the_browser_thread(run_scheduling_pass)
    expect(row.locator(".badge")).to_have_text("Scheduled")
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "live-01-list")

    # The detail: a reading of its card draws its allocation's line; a cancel shows up in place.
    page.click("text=live-e2e")
    expect(page.locator("#state")).to_have_text("Scheduled")
    mark(page)
    off_the_browser_thread(lambda: read_card_of("live-e2e", 63))
    expect(page.locator("#util-chart")).to_have_attribute("data-points", "1")
    assert page.evaluate("document.getElementById('util-chart').data[0].y") == [63]
    off_the_browser_thread(lambda: read_card_of("live-e2e", 71))
    expect(page.locator("#util-chart")).to_have_attribute("data-points", "2")
    # A page opened now starts the line from the readings so far (the utilization API).
    later = page.context.new_page()
    later.goto(page.url)
    expect(later.locator("#util-chart")).to_have_attribute("data-seeded", "1")
    assert later.evaluate("document.getElementById('util-chart').data[0].name") == "node-1/gpu0"
    later.close()
    off_the_browser_thread(lambda: cancel_request(GpuRequest.objects.get(pk=request.pk), user=member))
    expect(page.locator("#state")).to_have_text("Cancelled")
    expect(page.locator("#timeline")).to_contain_text("cancelled")
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "live-02-detail")


def test_cluster_heatmap_and_picture_update_without_reload(
    asgi_server, node, team, member, browser, screenshot, off_the_browser_thread
):
    def first_request():
        submit_request(user=member, team=team, name="heat-e2e", task_type="training", gpu_milli=1000)
        run_scheduling_pass()

    off_the_browser_thread(first_request)
    page = log_in_at(asgi_server.url, browser, "bob", "pw-bob-123")
    page.goto(f"{asgi_server.url}/cluster/")
    expect(page.locator('#pool-a100 a[data-request="heat-e2e"]')).to_have_count(1)
    mark(page)

    card_id = off_the_browser_thread(lambda: read_card_of("heat-e2e", 88))

    heat = "id => document.getElementById('heatmap').data[0].z.flat().includes(id)"
    page.wait_for_function(f"({heat})(88)")
    heatmap = page.evaluate("JSON.parse(document.getElementById('heatmap-data').textContent)")
    assert card_id in heatmap["gpu_ids"][0]

    # Another request takes the other card: the picture of node-1 shows it without a reload.
    def second_request():
        submit_request(user=member, team=team, name="second-e2e", task_type="training", gpu_milli=1000)
        run_scheduling_pass()
        tick()

    off_the_browser_thread(second_request)
    expect(page.locator('#pool-a100 a[data-request="second-e2e"]')).to_have_count(1)
    summary = page.locator("#cluster-summary tbody td.num")
    expect(summary).to_have_text(["0", "2", "0", "2"])  # free, allocated, held outside the portal, all
    assert page.evaluate(NOT_RELOADED)
    screenshot(page, "live-03-cluster")


def test_a_lost_connection_says_when_it_retries_and_comes_back(asgi_server, node, member, browser):
    page = log_in_at(asgi_server.url, browser, "bob", "pw-bob-123")
    page.goto(f"{asgi_server.url}/cluster/")
    mark(page)

    asgi_server.stop()
    expect(page.locator("#live-status")).to_contain_text("Connection lost; reconnecting in")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "reconnecting")
    asgi_server.start()

    expect(page.locator("#live-status")).to_have_text("● live", timeout=20_000)
    assert page.evaluate(NOT_RELOADED)
