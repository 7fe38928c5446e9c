"""A member requests a quarter GPU on spot, sees it placed, cancels it; an outsider cannot look."""

import pytest
from playwright.sync_api import expect

from scheduler_app.choices import CapacityType
from scheduler_app.models import GpuRequest
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.inventory import create_pool

pytestmark = pytest.mark.e2e


@pytest.fixture
def spot_cluster(make_node, team, member, outsider):
    """An on-demand and a spot pool, two nodes each, as in the demo."""
    spot = create_pool(name="a100-spot", gpu_model="A100-80GB", capacity_type=CapacityType.SPOT)
    for i in (1, 2):
        make_node(f"ondemand-{i}", gpus=4)
        make_node(f"spot-{i}", gpus=4, pool=spot)
    return spot


def test_member_requests_a_quarter_gpu_on_spot_sees_it_placed_and_cancels_it(
    spot_cluster, live_server, browser, log_in, screenshot, off_the_browser_thread
):
    page = log_in(browser, "bob", "pw-bob-123")
    screenshot(page, "01-home")

    # Request: 1/4 GPU, training, spot with a checkpoint interval; the estimate says where it would run.
    page.click("text=Request a GPU")
    page.fill("#id_name", "finetune-e2e")
    page.select_option("#id_share", "250")
    page.check("#id_billing_mode_1")
    page.fill("#id_checkpoint_interval_min", "15")
    expect(page.locator("#estimate-text")).to_contain_text("Would start now on spot-")
    expect(page.locator("#estimate-text")).to_contain_text("as the next scheduling pass would place it")
    expect(page.locator("#price-lines")).to_contain_text("For 1/4 GPU in a100-spot: not priced yet")
    screenshot(page, "02-request-form")
    page.click("text=Submit request")
    expect(page.locator("#state")).to_have_text("Pending")
    screenshot(page, "03-request-pending")
    request = off_the_browser_thread(lambda: GpuRequest.objects.get(name="finetune-e2e"))
    assert (request.gpu_milli, request.billing_mode, request.checkpoint_interval_s) == (250, "spot", 900)

    # The worker's pass places it; the cluster picture shows the slice on a spot GPU.
    assert off_the_browser_thread(run_scheduling_pass).started == 1  # what the worker does next
    page.click("text=Cluster")
    slice_ = page.locator('#pool-a100-spot a[data-request="finetune-e2e"]')
    expect(slice_).to_have_count(1)
    expect(slice_).to_have_attribute("title", "finetune-e2e · 250 milli-GPU")
    expect(page.locator("#pool-chart .main-svg").first).to_be_visible()
    screenshot(page, "04-cluster")

    # Cancel from the detail page (reached from the picture) and read the timeline.
    slice_.click()
    expect(page.locator("#state")).to_have_text("Scheduled")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button:has-text('Cancel')")
    expect(page.locator("#state")).to_have_text("Cancelled")
    steps = page.locator("#timeline .to").all_inner_texts()
    assert steps == ["pending", "scheduled", "cancelled"]
    screenshot(page, "05-request-cancelled")

    # An outsider gets a 404 for the same page.
    intruder = log_in(browser, "mallory", "pw-mallory-123")
    response = intruder.goto(page.url)
    assert response.status == 404
    screenshot(intruder, "06-outsider-404")
