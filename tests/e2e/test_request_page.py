"""The request page as its owner reads it: billing switched in the form's units, the timeline with its
checkpoints folded into one live line, and how to release a GPU held without a command."""

import pytest
from playwright.sync_api import expect

from billing_app.services import set_pool_price
from scheduler_app.models import GpuRequest
from scheduler_app.scheduling import run_scheduling_pass
from scheduler_app.services.requests import submit_request

pytestmark = pytest.mark.e2e


@pytest.fixture
def placed(make_node, pool, team, member, operator):
    """placed(**fields) -> a quarter-GPU on-demand request of bob's, placed by a scheduling pass."""
    make_node("node-1", gpus=2)
    set_pool_price(pool, "4.775", actor=operator)

    def make(**fields):
        request = submit_request(user=member, team=team, task_type="training", gpu_milli=250, **fields)
        assert run_scheduling_pass().started == 1
        return GpuRequest.objects.get(pk=request.pk)

    return make


def test_switching_to_spot_asks_the_checkpoint_interval_in_minutes_and_costs_read_as_money(
    placed, live_server, browser, log_in, screenshot, off_the_browser_thread
):
    request = off_the_browser_thread(lambda: placed(name="switch-me", command="python train.py"))
    page = log_in(browser, "bob", "pw-bob-123")
    page.goto(f"{live_server.url}/requests/{request.pk}/")
    expect(page.locator("#request-segments .segment-cost")).to_contain_text("$0.")

    switch = page.locator("#billing-switch")
    expect(switch.get_by_label("Checkpoint every")).to_be_visible()
    expect(switch).to_contain_text("min")
    screenshot(page, "request-billing-switch")
    switch.get_by_label("Checkpoint every").fill("15")
    switch.get_by_role("button", name="Switch to spot billing").click()

    expect(page.locator(".msg-success")).to_contain_text("switch-me is billed spot from now.")
    expect(page.locator("dl.facts")).to_contain_text("Spot · checkpoint every 15 min")
    screenshot(page, "request-billing-switched")


def test_a_gpu_held_without_a_command_says_how_to_release_it(
    placed, live_server, browser, log_in, screenshot, off_the_browser_thread
):
    request = off_the_browser_thread(lambda: placed(name="notebook", command=""))
    page = log_in(browser, "bob", "pw-bob-123")

    page.goto(f"{live_server.url}/requests/{request.pk}/")

    held = page.locator("#held-without-command")
    expect(held).to_contain_text("No command: this GPU is held for you, and billed, until you release it")
    expect(held).to_contain_text(f"gpu-portal release {request.pk}")
    expect(held).to_contain_text(f"POST /api/v1/requests/{request.pk}/release/")
    screenshot(page, "request-held-without-command")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Release GPUs").click()
    expect(page.locator("#state")).not_to_have_text("Scheduled")
    expect(held).to_have_count(0)
