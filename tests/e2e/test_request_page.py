"""The request page as its owner reads it: billing switched in the form's units, the timeline with its
checkpoints folded into one live line, and how to release a GPU held without a command."""

import datetime as dt

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from billing_app.services import set_pool_price
from scheduler_app.models import GpuRequest, Node
from scheduler_app.passes.run import run_scheduling_pass
from scheduler_app.services.agents import record_checkpoint, report_started
from scheduler_app.services.requests import cancel_request, submit_request
from tests.e2e.conftest import log_in_at

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
    # Billed spot from now, still on the on-demand card it was placed on: the page says both.
    expect(page.locator("dl.facts")).to_contain_text("spot (running on on-demand) · checkpoint every 15 min")
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


def checkpoint_times(count: int, before: dt.datetime) -> list[dt.datetime]:
    """`count` checkpoint times a second apart, the last a second before `before`."""
    return [before - dt.timedelta(seconds=count - i) for i in range(count)]


def test_checkpoints_fold_into_one_line_that_counts_them_live(
    asgi_server, placed, browser, screenshot, off_the_browser_thread
):
    def running_with_checkpoints():
        request = placed(name="checkpointing", command="python train.py")
        node = Node.objects.get(name="node-1")
        report_started(node, request.pk)
        for at in checkpoint_times(118, timezone.now()):
            record_checkpoint(node, request.pk, at)
        return request

    request = off_the_browser_thread(running_with_checkpoints)
    page = log_in_at(asgi_server.url, browser, "bob", "pw-bob-123")
    page.goto(f"{asgi_server.url}/requests/{request.pk}/")

    timeline = page.locator("#timeline > li")
    expect(timeline).to_have_count(4)  # pending, scheduled, running, the checkpoints
    assert page.locator("#timeline .to").all_inner_texts()[:3] == ["pending", "scheduled", "running"]
    folded = page.locator("#timeline li.checkpoints")
    expect(folded).to_have_count(1)
    expect(folded).to_contain_text("checkpointed 118 times, last ")
    screenshot(page, "request-checkpoints-folded")

    # A new checkpoint counts on the same line, in place; a state change still gets its own line.
    page.evaluate("window.stillTheSamePage = true")
    folded.evaluate("line => { line.sameLine = true; }")  # gone if the timeline were rendered anew
    expect(page.locator("#live-status")).to_have_text("● live")
    at = timezone.now().replace(microsecond=0)
    off_the_browser_thread(lambda: record_checkpoint(Node.objects.get(name="node-1"), request.pk, at))
    expect(folded).to_contain_text(f"checkpointed 119 times, last {at:%H:%M:%S} UTC")
    expect(timeline).to_have_count(4)
    assert folded.evaluate("line => line.sameLine === true")
    off_the_browser_thread(lambda: cancel_request(GpuRequest.objects.get(pk=request.pk), user=request.user))
    expect(page.locator("#state")).to_have_text("Cancelled")
    expect(timeline).to_have_count(5)
    assert page.evaluate("window.stillTheSamePage === true")
